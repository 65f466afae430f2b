// qkv::GgufFile on GGUF bytes built here by hand, field by field: every
// metadata value type in versions 2 and 3, the alignment, tensors, the typed
// reads, and every kind of bad file (each refused with a qkv::Error naming
// the file and the field, never a crash). tests/numpy/test_gguf.py reads
// files written by the gguf Python package.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/gguf.h"

namespace fs = std::filesystem;
using qkv::GgufFile;
using qkv::GgufType;
using qkv::GgufValue;

namespace {

// Little-endian bytes, appended field by field.
struct Bytes {
  std::string s;
  template <class T>
  Bytes& put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& str(const std::string& v) {
    put<uint64_t>(v.size());
    s += v;
    return *this;
  }
};

// One metadata entry: key, value type, the value's bytes.
std::string kv(const std::string& key, GgufType t, const std::string& value) {
  Bytes b;
  b.str(key).put<uint32_t>(static_cast<uint32_t>(t));
  return b.s + value;
}
template <class T>
std::string val(T v) {
  return Bytes().put(v).s;
}
std::string string_val(const std::string& v) { return Bytes().str(v).s; }
// An array's bytes: element type, count, the elements' bytes.
std::string array_val(GgufType et, uint64_t n, const std::string& elements) {
  return Bytes().put<uint32_t>(static_cast<uint32_t>(et)).put<uint64_t>(n).s + elements;
}

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order
  uint32_t type;
  uint64_t offset;
};

// A whole file: header, metadata entries, tensor infos, zeros up to the
// alignment, then `data`.
std::string gguf(const std::vector<std::string>& kvs, const std::vector<TensorInfo>& tensors,
                 const std::string& data, uint32_t version = 3, uint64_t alignment = 32) {
  Bytes b;
  b.s = "GGUF";
  b.put<uint32_t>(version).put<uint64_t>(tensors.size()).put<uint64_t>(kvs.size());
  for (const std::string& e : kvs) b.s += e;
  for (const TensorInfo& t : tensors) {
    b.str(t.name).put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (const uint64_t d : t.dims) b.put<uint64_t>(d);
    b.put<uint32_t>(t.type).put<uint64_t>(t.offset);
  }
  b.s.resize((b.s.size() + alignment - 1) / alignment * alignment, '\0');
  return b.s + data;
}

// The message of the qkv::Error that parsing `bytes` throws ("" if none).
std::string refusal(const std::string& bytes, const std::string& name = "bad.gguf") {
  try {
    GgufFile::parse(bytes, name);
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REFUSED(bytes, text)                                       \
  do {                                                                    \
    const std::string msg = refusal(bytes);                               \
    EXPECT_EQ(msg.rfind("'bad.gguf': ", 0), 0u) << msg;                   \
    EXPECT_NE(msg.find(text), std::string::npos) << "message: " << msg;  \
  } while (0)

// Every value type once, arrays of each, an array of arrays and an empty array.
std::vector<std::string> every_type() {
  return {
      kv("u8", GgufType::u8, val<uint8_t>(200)),
      kv("i8", GgufType::i8, val<int8_t>(-100)),
      kv("u16", GgufType::u16, val<uint16_t>(60000)),
      kv("i16", GgufType::i16, val<int16_t>(-30000)),
      kv("u32", GgufType::u32, val<uint32_t>(4000000000u)),
      kv("i32", GgufType::i32, val<int32_t>(-2000000000)),
      kv("f32", GgufType::f32, val<float>(0.1f)),
      kv("bool", GgufType::boolean, val<uint8_t>(1)),
      kv("str", GgufType::string, string_val("h\xc3\xa9llo")),
      kv("u64", GgufType::u64, val<uint64_t>(~uint64_t{0})),
      kv("i64", GgufType::i64, val<int64_t>(INT64_MIN)),
      kv("f64", GgufType::f64, val<double>(1.0 / 3)),
      kv("a.u8", GgufType::array, array_val(GgufType::u8, 3, "\x01\x02\xff")),
      kv("a.i16", GgufType::array, array_val(GgufType::i16, 2, val<int16_t>(-5) + val<int16_t>(7))),
      kv("a.u64", GgufType::array, array_val(GgufType::u64, 1, val<uint64_t>(uint64_t{1} << 63))),
      kv("a.f32", GgufType::array, array_val(GgufType::f32, 2, val<float>(0.5f) + val<float>(-2.0f))),
      kv("a.f64", GgufType::array, array_val(GgufType::f64, 1, val<double>(1e-300))),
      kv("a.bool", GgufType::array, array_val(GgufType::boolean, 2, std::string("\x00\x01", 2))),
      kv("a.str", GgufType::array, array_val(GgufType::string, 2, string_val("") + string_val("tok"))),
      kv("a.nested", GgufType::array,
         array_val(GgufType::array, 2,
                   array_val(GgufType::i32, 1, val<int32_t>(-9)) + array_val(GgufType::string, 1, string_val("x")))),
      kv("a.empty", GgufType::array, array_val(GgufType::f32, 0, "")),
  };
}

}  // namespace

TEST(GgufRead, EveryMetadataTypeInVersions2And3) {
  for (const uint32_t version : {2u, 3u}) {
    SCOPED_TRACE(version);
    const GgufFile f = GgufFile::parse(gguf(every_type(), {}, "", version), "m.gguf");
    EXPECT_EQ(f.version(), version);
    ASSERT_EQ(f.metadata().size(), every_type().size());
    EXPECT_EQ(f.metadata()[0].first, "u8");  // file order
    EXPECT_EQ(f.get_int("u8"), 200);
    EXPECT_EQ(f.get_int("i8"), -100);
    EXPECT_EQ(f.get_int("u16"), 60000);
    EXPECT_EQ(f.get_int("i16"), -30000);
    EXPECT_EQ(f.get_int("u32"), 4000000000);
    EXPECT_EQ(f.get_int("i32"), -2000000000);
    EXPECT_EQ(f.get_int("i64"), INT64_MIN);
    EXPECT_EQ(std::get<uint64_t>(f.find("u64")->data), ~uint64_t{0});
    EXPECT_EQ(f.get_float("f32"), static_cast<double>(0.1f));
    EXPECT_EQ(f.get_float("f64"), 1.0 / 3);
    EXPECT_TRUE(f.get_bool("bool"));
    EXPECT_EQ(f.get_string("str"), "h\xc3\xa9llo");
    EXPECT_EQ(f.find("u16")->type, GgufType::u16);
    EXPECT_EQ(f.get_ints("a.u8"), (std::vector<int64_t>{1, 2, 255}));
    EXPECT_EQ(f.get_ints("a.i16"), (std::vector<int64_t>{-5, 7}));
    EXPECT_EQ(f.get_floats("a.f32"), (std::vector<double>{0.5, -2.0}));
    EXPECT_EQ(f.get_floats("a.f64"), (std::vector<double>{1e-300}));
    EXPECT_EQ(std::get<std::vector<uint64_t>>(f.find("a.bool")->data), (std::vector<uint64_t>{0, 1}));
    EXPECT_EQ(f.find("a.bool")->element_type, GgufType::boolean);
    EXPECT_EQ(f.get_strings("a.str"), (std::vector<std::string>{"", "tok"}));
    EXPECT_TRUE(f.get_floats("a.empty").empty());
    const GgufValue* nested = f.find("a.nested");
    ASSERT_NE(nested, nullptr);
    EXPECT_EQ(nested->element_type, GgufType::array);
    const auto& inner = std::get<std::vector<GgufValue>>(nested->data);
    ASSERT_EQ(inner.size(), 2u);
    EXPECT_EQ(inner[0].element_type, GgufType::i32);
    EXPECT_EQ(std::get<std::vector<int64_t>>(inner[0].data), (std::vector<int64_t>{-9}));
    EXPECT_EQ(std::get<std::vector<std::string>>(inner[1].data), (std::vector<std::string>{"x"}));
    EXPECT_EQ(f.find("missing"), nullptr);
    EXPECT_TRUE(f.tensors().empty());
  }
}

TEST(GgufRead, TypedReadsNameTheKeyAndBothTypes) {
  const GgufFile f = GgufFile::parse(gguf(every_type(), {}, ""), "m.gguf");
  auto message = [&](auto read) -> std::string {
    try {
      read();
    } catch (const qkv::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message([&] { f.get_int("str"); }),
            "'m.gguf': metadata \"str\": expected an integer (UINT8 to INT64), found STRING");
  EXPECT_EQ(message([&] { f.get_int("bool"); }),
            "'m.gguf': metadata \"bool\": expected an integer (UINT8 to INT64), found BOOL");
  EXPECT_EQ(message([&] { f.get_string("u8"); }), "'m.gguf': metadata \"u8\": expected STRING, found UINT8");
  EXPECT_EQ(message([&] { f.get_float("i32"); }),
            "'m.gguf': metadata \"i32\": expected FLOAT32 or FLOAT64, found INT32");
  EXPECT_EQ(message([&] { f.get_bool("u8"); }), "'m.gguf': metadata \"u8\": expected BOOL, found UINT8");
  EXPECT_EQ(message([&] { f.get_strings("a.f32"); }),
            "'m.gguf': metadata \"a.f32\": expected ARRAY of STRING, found ARRAY of FLOAT32");
  EXPECT_EQ(message([&] { f.get_ints("str"); }),
            "'m.gguf': metadata \"str\": expected ARRAY of an integer type, found STRING");
  EXPECT_EQ(message([&] { f.get_floats("a.nested"); }),
            "'m.gguf': metadata \"a.nested\": expected ARRAY of FLOAT32 or FLOAT64, found ARRAY of ARRAY");
  EXPECT_EQ(message([&] { f.get_string("general.name"); }),
            "'m.gguf': metadata \"general.name\": expected STRING, found no such key");
  EXPECT_EQ(message([&] { f.get_int("u64"); }),
            "'m.gguf': metadata \"u64\": expected a value below 2^63, found 18446744073709551615");
  EXPECT_EQ(message([&] { f.get_ints("a.u64"); }),
            "'m.gguf': metadata \"a.u64\": element 0: expected a value below 2^63, found 9223372036854775808");
}

TEST(GgufRead, TensorsInGgmlOrderWithTheirBytes) {
  std::string data(160 + 144, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  const std::vector<TensorInfo> tensors = {
      {"w.f32", {4, 2}, 0, 0},    // 32 bytes
      {"w.q8", {32, 3}, 8, 32},   // 3 blocks of 34: 102 bytes, then padding to 160
      {"w.q4k", {256}, 12, 160},  // 144 bytes
  };
  const GgufFile f = GgufFile::parse(gguf({kv("k", GgufType::u8, val<uint8_t>(1))}, tensors, data), "t.gguf");
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  const qkv::GgufTensor* q8 = f.find_tensor("w.q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->shape, (qkv::Shape{32, 3}));
  EXPECT_EQ(q8->ggml_type, 8u);
  EXPECT_EQ(q8->offset, 32u);
  EXPECT_EQ(q8->bytes.size(), 102u);
  EXPECT_EQ(std::memcmp(q8->bytes.data(), data.data() + 32, 102), 0);
  EXPECT_EQ(f.tensors()[0].bytes.size(), 32u);
  EXPECT_EQ(f.tensors()[2].bytes.size(), 144u);
  EXPECT_EQ(std::memcmp(f.tensors()[2].bytes.data(), data.data() + 160, 144), 0);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufRead, AlignmentFromMetadata) {
  for (const uint32_t a : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(a);
    const std::string file = gguf({kv("general.alignment", GgufType::u32, val<uint32_t>(a))},
                                  {{"w", {2}, 0, a == 1 ? 0u : a}}, std::string(a + 8, '\1'), 3, a);
    const GgufFile f = GgufFile::parse(file, "a.gguf");
    EXPECT_EQ(f.alignment(), a);
    EXPECT_EQ(f.data_offset() % a, 0u);
    EXPECT_LE(f.data_offset() + f.tensors()[0].offset + 8, file.size());
  }
  // Alignment 1: a tensor may start at any byte, and data right after the infos.
  const std::string file = gguf({kv("general.alignment", GgufType::u32, val<uint32_t>(1))}, {{"w", {1}, 0, 3}},
                                std::string(7, '\0'), 3, 1);
  EXPECT_EQ(GgufFile::parse(file, "a.gguf").tensors()[0].offset, 3u);
}

TEST(GgufRead, ZeroSizedTensorsAndScalars) {
  const GgufFile f = GgufFile::parse(gguf({}, {{"empty", {0, 5}, 12, 0}, {"scalar", {}, 0, 0}}, "abcd"), "z.gguf");
  EXPECT_TRUE(f.tensors()[0].bytes.empty());
  EXPECT_EQ(f.tensors()[1].shape, qkv::Shape{});
  EXPECT_EQ(f.tensors()[1].bytes.size(), 4u);
}

TEST(GgufBad, HeaderMagicVersionEndianness) {
  EXPECT_REFUSED(std::string(), "magic: expected \"GGUF\", found the file ending after 0 bytes");
  EXPECT_REFUSED(std::string("GGU"), "found the file ending after 3 bytes");
  std::string file = gguf({}, {}, "");
  file[3] = 'G';
  EXPECT_REFUSED(file, "magic: expected \"GGUF\", found \"GGUG\" (not a GGUF file)");
  EXPECT_REFUSED(gguf({}, {}, "", 1), "version: expected version 2 or 3, found 1");
  EXPECT_REFUSED(gguf({}, {}, "", 4), "version: expected version 2 or 3, found 4");
  EXPECT_REFUSED(gguf({}, {}, "", 0x03000000), "version: expected a little-endian file, found a big-endian one");
  EXPECT_REFUSED(gguf({}, {}, "", 0x02000000), "(version 2 written byte-swapped)");
}

TEST(GgufBad, EveryTruncationIsRefused) {
  std::vector<std::string> kvs = every_type();
  kvs.push_back(kv("general.alignment", GgufType::u32, val<uint32_t>(16)));
  const std::string file = gguf(kvs, {{"w", {32}, 8, 0}, {"v", {3}, 0, 48}}, std::string(60, '\7'), 3, 16);
  ASSERT_EQ(GgufFile::parse(file, "cut.gguf").tensors().size(), 2u);
  for (size_t n = 0; n < file.size(); ++n) {
    const std::string msg = refusal(file.substr(0, n), "cut.gguf");
    ASSERT_EQ(msg.rfind("'cut.gguf': ", 0), 0u) << "prefix of " << n << " bytes: " << msg;
  }
}

TEST(GgufBad, CountsAndLengthsBeyondTheFile) {
  Bytes b;
  b.s = "GGUF";
  b.put<uint32_t>(3).put<uint64_t>(uint64_t{1} << 40).put<uint64_t>(0);
  EXPECT_REFUSED(b.s, "counts: expected counts that fit the file, found 1099511627776 tensors");
  b.s = "GGUF";
  b.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(~uint64_t{0});
  EXPECT_REFUSED(b.s, "counts: expected counts that fit the file");
  std::string key_too_long = gguf({Bytes().put<uint64_t>(1000).s + "abc"}, {}, "");
  EXPECT_REFUSED(key_too_long, "metadata entry 0: expected a key of 1000 bytes");
  EXPECT_REFUSED(gguf({kv("s", GgufType::string, Bytes().put<uint64_t>(~uint64_t{0}).s)}, {}, ""),
                 "metadata \"s\": expected a string of 18446744073709551615 bytes");
  EXPECT_REFUSED(gguf({kv("a", GgufType::array, array_val(GgufType::u32, uint64_t{1} << 62, ""))}, {}, ""),
                 "metadata \"a\": expected an array length that fits the file, found 4611686018427387904 "
                 "elements of UINT32");
  EXPECT_REFUSED(gguf({kv("a", GgufType::array, array_val(GgufType::string, 1000, ""))}, {}, ""),
                 "elements of STRING (at least 8 bytes each)");
}

TEST(GgufBad, MetadataValues) {
  EXPECT_REFUSED(gguf({kv("k", static_cast<GgufType>(13), val<uint8_t>(0))}, {}, ""),
                 "metadata \"k\": expected a value type from 0 (UINT8) to 12 (FLOAT64), found 13");
  EXPECT_REFUSED(gguf({kv("k", GgufType::array, array_val(static_cast<GgufType>(99), 1, "x"))}, {}, ""),
                 "metadata \"k\": expected an array element type from 0 (UINT8) to 12 (FLOAT64), found 99");
  EXPECT_REFUSED(gguf({kv("b", GgufType::boolean, val<uint8_t>(2))}, {}, ""),
                 "metadata \"b\": expected a BOOL of 0 or 1, found 2");
  EXPECT_REFUSED(gguf({kv("k", GgufType::u8, val<uint8_t>(1)), kv("k", GgufType::string, string_val("x"))}, {}, ""),
                 "metadata \"k\": expected each key once, found it twice");
  // Arrays of arrays nest up to 8 deep.
  std::string deep = array_val(GgufType::u8, 0, "");
  for (int depth = 1; depth < 8; ++depth) deep = array_val(GgufType::array, 1, deep);
  EXPECT_NO_THROW(GgufFile::parse(gguf({kv("d", GgufType::array, deep)}, {}, ""), "deep.gguf"));
  EXPECT_REFUSED(gguf({kv("d", GgufType::array, array_val(GgufType::array, 1, deep))}, {}, ""),
                 "metadata \"d\": expected arrays nested at most 8 deep, found deeper");
}

TEST(GgufBad, Alignment) {
  EXPECT_REFUSED(gguf({kv("general.alignment", GgufType::string, string_val("32"))}, {}, ""),
                 "metadata \"general.alignment\": expected UINT32, found STRING");
  EXPECT_REFUSED(gguf({kv("general.alignment", GgufType::u64, val<uint64_t>(32))}, {}, ""),
                 "metadata \"general.alignment\": expected UINT32, found UINT64");
  for (const uint32_t a : {0u, 48u, 3u})
    EXPECT_REFUSED(gguf({kv("general.alignment", GgufType::u32, val<uint32_t>(a))}, {}, ""),
                   "metadata \"general.alignment\": expected a power of two, found " + std::to_string(a));
}

TEST(GgufBad, TensorInfos) {
  const std::string data(256, '\0');
  EXPECT_REFUSED(gguf({}, {{"w", {1, 1, 1, 1, 1}, 0, 0}}, data),
                 "tensor \"w\": expected at most 4 dims, found n_dims 5");
  EXPECT_REFUSED(gguf({}, {{"w", {uint64_t{1} << 63}, 0, 0}}, data),
                 "tensor \"w\": expected dims below 2^63, found 9223372036854775808");
  EXPECT_REFUSED(gguf({}, {{"w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0}}, data),
                 "tensor \"w\": expected a shape of fewer than 2^63 elements, found [4294967296, 4294967296]");
  EXPECT_REFUSED(gguf({}, {{"w", {uint64_t{1} << 62}, 0, 0}}, data),
                 "tensor \"w\": expected fewer than 2^63 bytes, found shape [4611686018427387904] of F32");
  EXPECT_REFUSED(gguf({}, {{"w", {4}, 99, 0}}, data),
                 "tensor \"w\": expected a ggml tensor type, found unknown type id 99");
  EXPECT_REFUSED(gguf({}, {{"w", {4}, 4, 0}}, data), "found unknown type id 4");  // ggml's removed Q4_2
  EXPECT_REFUSED(gguf({}, {{"w", {100, 2}, 12, 0}}, data),
                 "tensor \"w\": expected ne[0] (the row length) to be a multiple of 256 for Q4_K, "
                 "found shape [100, 2]");
  EXPECT_REFUSED(gguf({}, {{"w", {2}, 0, 0}, {"w", {2}, 0, 32}}, data),
                 "tensor \"w\": expected each tensor name once, found it twice");
  EXPECT_REFUSED(gguf({}, {{std::string("w\xff\n", 3), {2}, 0, 0}, {std::string("w\xff\n", 3), {2}, 0, 32}}, data),
                 "tensor \"w\\xff\\n\": expected each tensor name once");
}

TEST(GgufBad, TensorOffsets) {
  const std::string data(128, '\0');
  EXPECT_REFUSED(gguf({}, {{"w", {4}, 0, 16}}, data),
                 "tensor \"w\": expected an offset that is a multiple of the alignment 32, found 16");
  EXPECT_REFUSED(gguf({}, {{"w", {4}, 0, 128}}, data),
                 "tensor \"w\": expected its 16 bytes at offset 128 inside the 128 bytes of data, found them past the "
                 "end of the file (truncated file?)");
  EXPECT_REFUSED(gguf({}, {{"w", {40}, 0, 0}}, data), "expected its 160 bytes at offset 0 inside the 128 bytes");
  EXPECT_REFUSED(gguf({}, {{"w", {4}, 0, uint64_t{1} << 63}}, data),
                 "expected its 16 bytes at offset 9223372036854775808");
  EXPECT_REFUSED(gguf({}, {{"w", {4}, 0, ~uint64_t{31}}}, data), "found them past the end of the file");
  EXPECT_REFUSED(gguf({}, {{"a", {16}, 0, 0}, {"b", {8}, 0, 32}}, data),
                 "tensor \"b\": expected data apart from every other tensor's, found bytes [32, 64) overlapping "
                 "tensor \"a\"'s [0, 64)");
  // A zero-sized tensor between them does not hide the overlap.
  EXPECT_REFUSED(gguf({}, {{"a", {24}, 0, 0}, {"e", {0}, 0, 32}, {"b", {8}, 0, 64}}, data),
                 "tensor \"b\": expected data apart from every other tensor's");
}

TEST(GgufFileOpen, MapsTheFileAndNamesItInErrors) {
  const fs::path dir = fs::temp_directory_path() / ("qkv_test_gguf_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  std::string data(32, '\0');
  for (int i = 0; i < 8; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(data.data() + 4 * i, &v, 4);
  }
  {
    std::ofstream out(path, std::ios::binary);
    out << gguf({kv("general.name", GgufType::string, string_val("tiny"))}, {{"w", {8}, 0, 0}}, data);
  }
  std::optional<GgufFile> copy;
  {
    const GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.name(), path);
    EXPECT_EQ(f.get_string("general.name"), "tiny");
    copy = f;  // the copy keeps the mapping alive
  }
  float x[8];
  std::memcpy(x, copy->tensors()[0].bytes.data(), sizeof x);
  EXPECT_EQ(x[7], 7.0f);

  auto message = [](const std::string& p) -> std::string {
    try {
      GgufFile::open(p);
    } catch (const qkv::Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message((dir / "none.gguf").string()), "cannot open '" + (dir / "none.gguf").string() +
                                                       "': No such file or directory");
  EXPECT_EQ(message(dir.string()), "cannot read '" + dir.string() + "': it is a directory");
  { std::ofstream(dir / "empty.gguf"); }
  EXPECT_EQ(message((dir / "empty.gguf").string()),
            "'" + (dir / "empty.gguf").string() + "': magic: expected \"GGUF\", found the file ending after 0 bytes "
            "(not a GGUF file?)");
  fs::remove_all(dir);
}

TEST(GgufTypes, NamesAndLayouts) {
  EXPECT_STREQ(qkv::gguf_type_name(GgufType::u8), "UINT8");
  EXPECT_STREQ(qkv::gguf_type_name(GgufType::f64), "FLOAT64");
  EXPECT_STREQ(qkv::gguf_type_name(static_cast<GgufType>(13)), "?");
  const qkv::GgmlTypeLayout* q6k = qkv::ggml_type_layout(14);
  ASSERT_NE(q6k, nullptr);
  EXPECT_STREQ(q6k->name, "Q6_K");
  EXPECT_EQ(q6k->block, 256);
  EXPECT_EQ(q6k->block_bytes, 210u);
  for (const uint32_t gone : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 1000u})
    EXPECT_EQ(qkv::ggml_type_layout(gone), nullptr) << gone;
}
