#include "qkv/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using qkv::DType;
using qkv::Shape;
using qkv::Tensor;

namespace {

const std::string kName = "t.safetensors";

std::string u64_le(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A file with exactly this header text (no padding added) and data, built by
// hand so that each malformed case changes one thing.
std::string make_file(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string out;
  for (float x : v) out.append(reinterpret_cast<const char*>(&x), sizeof x);
  return out;
}

// Parses `bytes` expecting a qkv::Error whose one-line message starts with
// the file name and contains `part`.
void expect_error(const std::string& bytes, const std::string& part) {
  try {
    qkv::parse_safetensors(bytes, kName);
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const qkv::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected: " << part;
    EXPECT_EQ(msg.rfind("'" + kName + "': ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

void expect_same(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.nbytes(), b.nbytes());
  if (a.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  }
}

// A tensor whose elements are all distinct-ish, of any dtype.
Tensor sample(DType dt, const Shape& shape) {
  Tensor t(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::f32) t.data<float>()[i] = 0.5f * static_cast<float>(i) - 3.25f;
    if (dt == DType::f64) t.data<double>()[i] = -1.0 / static_cast<double>(i + 3);
    if (dt == DType::boolean) t.data<bool>()[i] = i % 3 == 1;
  }
  return t;
}

// Two small tensors in a valid file: "a" F32 [2] then "m" BOOL [3].
std::string good_file() {
  const Tensor a = Tensor::from<float>({2}, {1.0f, -2.0f});
  const Tensor m = Tensor::from<bool>({3}, {true, false, true});
  return qkv::safetensors_bytes({{"a", &a}, {"m", &m}}, {{"format", "pt"}});
}

class SafetensorsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qkv_test_safetensors_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---- round trips -------------------------------------------------------------

TEST_F(SafetensorsFiles, RoundTripEveryDtypeRankAndZeroSize) {
  const std::vector<Shape> shapes = {{}, {5}, {2, 3}, {2, 1, 3}, {1, 2, 3, 2}, {0}, {2, 0, 3}, {3, 0}};
  std::vector<Tensor> keep;
  for (DType dt : {DType::f32, DType::f64, DType::boolean})
    for (const Shape& s : shapes) keep.push_back(sample(dt, s));
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (size_t i = 0; i < keep.size(); ++i) named.emplace_back("t" + std::to_string(i), &keep[i]);

  const std::string p = path("all.safetensors");
  qkv::write_safetensors(p, named);
  const auto back = qkv::read_safetensors(p);
  ASSERT_EQ(back.size(), keep.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    SCOPED_TRACE(named[i].first + " " + qkv::shape_str(keep[i].shape()));
    ASSERT_EQ(back.count(named[i].first), 1u);
    expect_same(back.at(named[i].first), keep[i]);
  }
  // Each alone too, so the single-tensor and first-at-zero cases are covered.
  for (size_t i = 0; i < keep.size(); ++i) {
    qkv::write_safetensors(p, {{"x", &keep[i]}});
    expect_same(qkv::read_safetensors(p).at("x"), keep[i]);
  }
}

TEST_F(SafetensorsFiles, RoundTripKeepsSpecialValuesBitExact) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor t = Tensor::from<float>({5}, {nan, inf, -inf, -0.0f, 1e-45f});
  const std::string p = path("special.safetensors");
  qkv::write_safetensors(p, {{"s", &t}});
  expect_same(qkv::read_safetensors(p).at("s"), t);
}

TEST_F(SafetensorsFiles, MetadataRoundTrip) {
  const Tensor t = sample(DType::f32, {2, 2});
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"config", "{\"n_layer\": 4}"}, {"note", "line one\nline \"two\" \\ é 中"}, {"empty", ""}};
  const std::string p = path("meta.safetensors");
  qkv::write_safetensors(p, {{"w", &t}}, meta);
  EXPECT_EQ(qkv::read_safetensors_metadata(p), meta);
  expect_same(qkv::read_safetensors(p).at("w"), t);

  // No metadata: no "__metadata__" key at all, and an empty map back.
  qkv::write_safetensors(p, {{"w", &t}});
  EXPECT_TRUE(qkv::read_safetensors_metadata(p).empty());
  const std::string bytes = qkv::safetensors_bytes({{"w", &t}});
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
}

TEST_F(SafetensorsFiles, NoTensorsIsAValidFile) {
  const std::string p = path("empty.safetensors");
  qkv::write_safetensors(p, {}, {{"k", "v"}});
  EXPECT_TRUE(qkv::read_safetensors(p).empty());
  EXPECT_EQ(qkv::read_safetensors_metadata(p).at("k"), "v");
  EXPECT_EQ(qkv::safetensors_bytes({}), u64_le(8) + "{}      ");
}

TEST_F(SafetensorsFiles, NamesWithUnicodeAndPunctuation) {
  const Tensor t = sample(DType::f64, {3});
  const std::vector<std::string> names = {"transformer.h.0.attn.c_attn.weight", "é中😀", "quote\"back\\slash", "", " "};
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (const auto& n : names) named.emplace_back(n, &t);
  const std::string p = path("names.safetensors");
  qkv::write_safetensors(p, named);
  const auto back = qkv::read_safetensors(p);
  ASSERT_EQ(back.size(), names.size());
  for (const auto& n : names) expect_same(back.at(n), t);
}

// ---- layout ------------------------------------------------------------------

// The same bytes as safetensors 0.8.0's Python writer gives for
// save({"m": np.array([True, False, True]), "a": np.array([1, -2], np.float32)},
//      metadata={"format": "pt"})  (compared by hand once; Python not needed here).
TEST(Safetensors, ByteExactLayoutOfASmallFile) {
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[8,11]}}";
  ASSERT_EQ(header.size(), 140u);
  std::string expected("\x90\0\0\0\0\0\0\0", 8);  // 144 = 140 + 4 spaces of padding
  expected += header + "    ";
  expected += std::string("\x00\x00\x80\x3f", 4);  // 1.0f
  expected += std::string("\x00\x00\x00\xc0", 4);  // -2.0f
  expected += std::string("\x01\x00\x01", 3);
  EXPECT_EQ(good_file(), expected);
}

TEST(Safetensors, HeaderIsPaddedToAMultipleOf8AndTensorsKeepTheirOrder) {
  const Tensor t = sample(DType::f32, {1});
  for (size_t len = 1; len <= 9; ++len) {
    const std::string name(len, 'n');
    const std::string bytes = qkv::safetensors_bytes({{name, &t}, {"b", &t}, {"a", &t}});
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << name;
    EXPECT_EQ(bytes.size(), 8 + n + 12);
    // Order given, not sorted: the name first, then "b", then "a".
    const std::string h = bytes.substr(8, n);
    EXPECT_LT(h.find("\"" + name + "\""), h.find("\"b\""));
    EXPECT_LT(h.find("\"b\""), h.find("\"a\""));
    EXPECT_NE(h.find("\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}"), std::string::npos) << h;
    const std::string padding = h.substr(h.rfind('}') + 1);
    EXPECT_LT(padding.size(), 8u);
    EXPECT_EQ(padding, std::string(padding.size(), ' '));
  }
}

TEST(Safetensors, ReadsWhatOtherWritersMayWrite) {
  // "__metadata__" last, whitespace, no padding, data in the opposite order
  // from the header's keys, a zero-size tensor between two others.
  const std::string header =
      "{ \"b\" : {\"data_offsets\": [0, 4], \"shape\": [1], \"dtype\": \"F32\"},\n"
      "  \"z\": {\"dtype\": \"F64\", \"shape\": [0, 2], \"data_offsets\": [4, 4]},\n"
      "  \"a\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [4, 8]},\n"
      "  \"__metadata__\": {\"k\": \"v\"} }\t\n ";
  const auto t = qkv::parse_safetensors(make_file(header, f32_bytes({7.0f, 9.0f})), kName);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at("b").data<float>()[0], 7.0f);
  EXPECT_EQ(t.at("a").rank(), 0);
  EXPECT_EQ(t.at("a").data<float>()[0], 9.0f);
  EXPECT_EQ(t.at("z").shape(), (Shape{0, 2}));
  EXPECT_EQ(t.at("z").dtype(), DType::f64);
}

// ---- the writer's checks -----------------------------------------------------

TEST_F(SafetensorsFiles, WriterRejectsBadNamesAndLeavesNoFile) {
  const Tensor t = sample(DType::f32, {2});
  const std::string p = path("w.safetensors");
  const auto expect_write_error = [&](const std::vector<std::pair<std::string, const Tensor*>>& named,
                                      const std::map<std::string, std::string>& meta, const std::string& part) {
    try {
      qkv::write_safetensors(p, named, meta);
      ADD_FAILURE() << "no error; expected " << part;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(p));
  };
  expect_write_error({{"a", &t}, {"a", &t}}, {}, "tensor name \"a\" appears twice");
  expect_write_error({{"__metadata__", &t}}, {}, "\"__metadata__\" is reserved");
  expect_write_error({{"a", nullptr}}, {}, "is a null pointer");
  expect_write_error({{"bad\xff", &t}}, {}, "not valid UTF-8");
  expect_write_error({{"a", &t}}, {{"k", "\xc3"}}, "not valid UTF-8");
  // Only the temporary ever existed; nothing is left behind in the folder.
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsFiles, WriteIsAtomicAndReportsUnwritablePaths) {
  const Tensor a = sample(DType::f32, {4}), b = sample(DType::f64, {2, 2});
  const std::string p = path("c.safetensors");
  qkv::write_safetensors(p, {{"a", &a}});
  qkv::write_safetensors(p, {{"b", &b}});  // replaces the old file whole
  const auto back = qkv::read_safetensors(p);
  ASSERT_EQ(back.size(), 1u);
  expect_same(back.at("b"), b);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  try {
    qkv::write_safetensors(path("no/such/dir/x.safetensors"), {{"a", &a}});
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsFiles, ReaderReportsMissingFilesAndDirectories) {
  try {
    qkv::read_safetensors(path("missing.safetensors"));
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  try {
    qkv::read_safetensors_metadata(dir_.string());
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("it is a directory"), std::string::npos) << e.what();
  }
  // A malformed file on disk names its path.
  const std::string p = path("bad.safetensors");
  std::ofstream(p, std::ios::binary) << "junk";
  try {
    qkv::read_safetensors(p);
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("'" + p + "': truncated safetensors file: 4 bytes", 0), 0u) << e.what();
  }
}

// ---- malformed files -----------------------------------------------------------

const std::string kA = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";

TEST(SafetensorsMalformed, LengthField) {
  expect_error("", "not a safetensors file: it is empty");
  expect_error(std::string("\x05\0\0", 3), "truncated safetensors file: 3 bytes, the header length alone needs 8");
  expect_error(u64_le(1000) + "{}        ", "header length 1000 runs past the end of the file (10 bytes after");
  expect_error(u64_le(200'000'000) + "{}", "header length 200000000 exceeds the limit of 100000000 bytes");
  expect_error(u64_le(~uint64_t{0}) + "{}", "header length 18446744073709551615 exceeds the limit");
}

TEST(SafetensorsMalformed, HeaderIsNotAJsonObject) {
  expect_error(make_file("", ""), "header must be a JSON object starting with '{', found an empty header");
  expect_error(make_file("  {}", ""), "must be a JSON object starting with '{', found \"  {}\"");
  expect_error(make_file("[1,2]", ""), "must be a JSON object starting with '{'");
  expect_error(make_file("{\"a\": }", ""), "bad safetensors header: not valid JSON at line 1, column 7: syntax error while parsing value");
  expect_error(make_file("{}garbage", ""), "not valid JSON");
  expect_error(make_file("{/* c */}", ""), "not valid JSON");
  expect_error(make_file("{\n\n \"a\" \x01", ""), "not valid JSON");  // message stays on one line
  expect_error(make_file("{\"\xff\":{}}", ""), "not valid JSON");        // invalid UTF-8
  expect_error(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", std::string(8, '\0')),
               "JSON nested deeper than 3 levels");
  expect_error(make_file("{\"a\":" + std::string(100000, '['), ""), "JSON nested deeper than 3 levels");
}

TEST(SafetensorsMalformed, DuplicateKeys) {
  expect_error(make_file("{" + kA + "," + kA + "}", std::string(8, '\0')), "duplicate key \"a\"");
  expect_error(make_file("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                         std::string(8, '\0')),
               "duplicate key \"dtype\" (inside \"a\")");
  expect_error(make_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", ""), "duplicate key \"k\" (inside \"__metadata__\")");
}

TEST(SafetensorsMalformed, TensorEntries) {
  const auto entry = [](const std::string& body) { return make_file("{\"a\":" + body + "}", std::string(8, '\0')); };
  expect_error(entry("5"), "tensor \"a\": expected an object with \"dtype\", \"shape\" and \"data_offsets\", found 5");
  expect_error(entry("{\"dtype\":\"F32\",\"data_offsets\":[0,8]}"), "tensor \"a\": missing \"shape\"");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"offsets\":1}"),
               "tensor \"a\": unexpected key \"offsets\"");
  expect_error(entry("{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}"),
               "tensor \"a\": dtype \"F16\" is not supported (qkv reads F32, F64 and BOOL)");
  expect_error(entry("{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}"), "dtype \"I64\" is not supported");
  expect_error(entry("{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}"), "\"dtype\" must be a string such as \"F32\", found 32");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}"),
               "\"shape\" must be a list of non-negative integers, found [2,-1]");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}"), "non-negative integers, found [2.0]");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}"), "non-negative integers, found \"2\"");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[18446744073709551615],\"data_offsets\":[0,8]}"),
               "non-negative integers, found [18446744073709551615]");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}"),
               "\"data_offsets\" must be [begin, end] with non-negative integers, found [0,8,8]");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,8]}"), "\"data_offsets\" must be [begin, end]");
  expect_error(entry("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"b\":0}}"), "\"data_offsets\" must be [begin, end]");
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  const auto entry = [](const std::string& shape) {
    return make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,8]}}", std::string(8, '\0'));
  };
  expect_error(entry("[4294967296,4294967296]"), "tensor \"a\": shape [4294967296, 4294967296] of F32 overflows");
  expect_error(entry("[9223372036854775807,2]"), "overflows: more than 2^63 bytes");
  expect_error(entry("[3037000500,3037000500,0]"), "overflows");  // multiplied left to right, as the reference does
}

TEST(SafetensorsMalformed, DtypeAndShapeDisagreeWithTheBytes) {
  const std::string d8(8, '\0');
  expect_error(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d8),
               "tensor \"a\": shape [3] of F32 needs 12 bytes, data_offsets [0, 8] hold 8");
  expect_error(make_file("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8),
               "shape [2] of F64 needs 16 bytes, data_offsets [0, 8] hold 8");
  expect_error(make_file("{\"a\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[0,8]}}", d8),
               "shape [] of BOOL needs 1 bytes, data_offsets [0, 8] hold 8");
}

TEST(SafetensorsMalformed, OffsetsOutOfRangeOverlappingOrNotCovering) {
  const auto f32 = [](const std::string& name, int begin, int end, int n) {
    return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
  };
  expect_error(make_file("{" + f32("a", 8, 4, 1) + "}", std::string(8, '\0')),
               "tensor \"a\": data_offsets [8, 4] end before they begin");
  expect_error(make_file("{" + f32("a", 0, 400, 100) + "}", std::string(8, '\0')),
               "tensor \"a\": data_offsets [0, 400] run past the end of the data, which is 8 bytes (truncated file?)");
  expect_error(make_file("{" + f32("a", 0, 8, 2) + "," + f32("b", 4, 12, 2) + "}", std::string(12, '\0')),
               "tensor \"b\" [4, 12) overlaps tensor \"a\" [0, 8)");
  expect_error(make_file("{" + f32("a", 0, 8, 2) + "," + f32("b", 0, 8, 2) + "}", std::string(8, '\0')),
               "tensor \"b\" [0, 8) overlaps tensor \"a\" [0, 8)");
  expect_error(make_file("{" + f32("a", 0, 8, 2) + ",\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                         std::string(8, '\0')),
               "tensor \"z\" [4, 4) overlaps tensor \"a\" [0, 8)");
  expect_error(make_file("{" + f32("a", 0, 4, 1) + "," + f32("b", 8, 12, 1) + "}", std::string(12, '\0')),
               "bytes [4, 8) of the data belong to no tensor (between tensor \"a\" and tensor \"b\"); tensors must be contiguous");
  expect_error(make_file("{" + f32("a", 4, 8, 1) + "}", std::string(8, '\0')),
               "bytes [0, 4) of the data belong to no tensor (before tensor \"a\")");
  expect_error(make_file("{" + f32("a", 0, 4, 1) + "}", std::string(8, '\0')),
               "the tensors cover 4 bytes of data, the file holds 8: 4 trailing bytes belong to no tensor");
  expect_error(make_file("{}", "xyz"), "the tensors cover 0 bytes of data, the file holds 3");
}

TEST(SafetensorsMalformed, Metadata) {
  expect_error(make_file("{\"__metadata__\":[1]}", ""), "\"__metadata__\" must be an object of strings, found [1]");
  expect_error(make_file("{\"__metadata__\":{\"k\":1}}", ""), "\"__metadata__\": value of \"k\" must be a string, found 1");
  expect_error(make_file("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", ""), "value of \"k\" must be a string");
}

TEST(SafetensorsMalformed, BoolBytesOtherThanZeroOrOne) {
  expect_error(make_file("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}", std::string("\x01\x02\x00", 3)),
               "tensor \"m\": BOOL element 1 is byte 2, expected 0 or 1");
}

TEST(SafetensorsMalformed, TruncatedData) {
  const std::string good = good_file();
  expect_error(good.substr(0, good.size() - 1),
               "tensor \"m\": data_offsets [8, 11] run past the end of the data, which is 10 bytes");
  expect_error(good + "x", "1 trailing bytes belong to no tensor");
}

TEST(SafetensorsMalformed, EveryTruncationIsAnError) {
  const std::string good = good_file();
  ASSERT_NO_THROW(qkv::parse_safetensors(good, kName));
  for (size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE("first " + std::to_string(n) + " bytes");
    EXPECT_THROW(qkv::parse_safetensors(good.substr(0, n), kName), qkv::Error);
  }
}

TEST(SafetensorsMalformed, EveryTamperedByteIsAnErrorOrAValidFile) {
  // Each byte of the file replaced by a handful of values: whatever the
  // result, it must be a clean qkv::Error or tensors whose bytes tile the data.
  const std::string good = good_file();
  int errors = 0, parsed = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (const unsigned char v : {0x00, 0x01, 0x20, 0x22, 0x30, 0x39, 0x5b, 0x7b, 0x7d, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(v);
      try {
        const auto t = qkv::parse_safetensors(bad, kName);
        size_t total = 0;
        for (const auto& [name, tensor] : t) total += tensor.nbytes();
        uint64_t n = 0;
        std::memcpy(&n, bad.data(), 8);
        EXPECT_EQ(8 + n + total, bad.size());
        ++parsed;
      } catch (const qkv::Error& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(parsed, 0);  // e.g. changed padding or data bytes
}

}  // namespace
