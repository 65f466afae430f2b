#include "qkv/npy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/files.h"
#include "numpy/npy_fixtures.h"

namespace fs = std::filesystem;
using qkv::DType;
using qkv::Shape;
using qkv::Tensor;

namespace {

std::string str(std::string_view v) { return std::string(v); }

// A .npy file with the given header dict and data, built by hand so that each
// malformed case changes exactly one thing.
std::string make_npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const size_t len = dict.size() + 1;
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + dict + "\n" + data;
}

std::string dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

// Parses `bytes` expecting a qkv::Error whose one-line message starts with
// the file name and contains `part`.
void expect_error(const std::string& bytes, const std::string& part) {
  try {
    qkv::parse_npy(bytes, "t.npy");
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const qkv::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected: " << part;
    EXPECT_EQ(msg.rfind("'t.npy': ", 0), 0u) << msg;
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

// A tensor whose bytes are all distinct-ish, of any dtype.
Tensor sample(DType dt, const Shape& shape) {
  Tensor t(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::f32) t.data<float>()[i] = 0.5f * static_cast<float>(i) - 3.25f;
    if (dt == DType::f64) t.data<double>()[i] = -1.0 / static_cast<double>(i + 3);
    if (dt == DType::boolean) t.data<bool>()[i] = i % 3 == 1;
  }
  return t;
}

class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qkv_test_npy_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

}  // namespace

TEST(NpyNumpy, ReadsNumpyFiles) {
  const Tensor a = qkv::parse_npy(str(npy_fixtures::f32_2x3), "a");
  expect_same(a, Tensor::from<float>({2, 3}, {-0.5f, -0.25f, 0.0f, 0.25f, 0.5f, 0.75f}));
  expect_same(qkv::parse_npy(str(npy_fixtures::f64_scalar), "s"), Tensor::from<double>({}, {-1.25}));
  expect_same(qkv::parse_npy(str(npy_fixtures::bool_5), "b"),
              Tensor::from<bool>({5}, {true, false, true, true, false}));
  expect_same(qkv::parse_npy(str(npy_fixtures::f32_0x3), "z"), Tensor(DType::f32, {0, 3}));
  std::vector<double> v(12);
  for (int i = 0; i < 12; ++i) v[i] = 0.5 * i;
  expect_same(qkv::parse_npy(str(npy_fixtures::f64_2x1x2x3), "r4"), Tensor::from<double>({2, 1, 2, 3}, v));
}

TEST(NpyNumpy, ReadsVersions2And3) {
  expect_same(qkv::parse_npy(str(npy_fixtures::f32_v2), "v2"), Tensor::from<float>({2}, {1.5f, -2.0f}));
  expect_same(qkv::parse_npy(str(npy_fixtures::f64_v3), "v3"), Tensor::from<double>({2, 1}, {0.25, 4.0}));
}

// Fortran order and big-endian dtypes load into the same C-ordered,
// native-order Tensor NumPy's np.ascontiguousarray(a).astype('<f4') gives.
TEST(NpyNumpy, ReadsFortranOrderAndBigEndian) {
  expect_same(qkv::parse_npy(str(npy_fixtures::fortran_2x3), "f"),
              Tensor::from<float>({2, 3}, {0, 1, 2, 3, 4, 5}));
  expect_same(qkv::parse_npy(str(npy_fixtures::big_endian_f4), "be"),
              Tensor::from<float>({3}, {0, 1, 2}));
  expect_same(qkv::parse_npy(str(npy_fixtures::big_endian_f8_2x2), "be8"),
              Tensor::from<double>({2, 2}, {-1, -0.25, 0.5, 1.25}));
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[i] = 0.5 * i;
  expect_same(qkv::parse_npy(str(npy_fixtures::fortran_f8_2x3x4), "f3"),
              Tensor::from<double>({2, 3, 4}, v));
  expect_same(qkv::parse_npy(str(npy_fixtures::fortran_big_endian_f4_3x2), "fbe"),
              Tensor::from<float>({3, 2}, {0, 1, 2, 3, 4, 5}));
  // Hand-made: a Fortran-ordered [2, 2] bool, column by column.
  expect_same(qkv::parse_npy(make_npy("{'descr': '|b1', 'fortran_order': True, 'shape': (2, 2), }",
                                      std::string("\1\0\1\1", 4)),
                             "fb"),
              Tensor::from<bool>({2, 2}, {true, true, false, true}));
  // Written back, each is a plain C-ordered little-endian file.
  const Tensor t = qkv::parse_npy(str(npy_fixtures::fortran_big_endian_f4_3x2), "fbe");
  expect_same(qkv::parse_npy(qkv::npy_bytes(t), "again"), t);
}

// np.save's exact bytes, padding and spare space for growth included.
TEST(NpyNumpy, WritesWhatNumpyWrites) {
  for (std::string_view fixture : {npy_fixtures::f32_2x3, npy_fixtures::f64_scalar, npy_fixtures::bool_5,
                                   npy_fixtures::f32_0x3, npy_fixtures::f64_2x1x2x3}) {
    const std::string bytes = str(fixture);
    EXPECT_EQ(qkv::npy_bytes(qkv::parse_npy(bytes, "f")), bytes);
  }
}

TEST(NpyParse, TolerantHeaderSyntax) {
  const std::string data(8, '\0');
  for (const std::string& d :
       {std::string("{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}"),
        std::string("{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2L,)}"),
        std::string("  {\t'descr' : '<f4' ,\n'fortran_order': False, 'shape': ( 2 , ) , }  "),
        std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}")}) {
    expect_same(qkv::parse_npy(make_npy(d, data), "t"), Tensor(DType::f32, {2}));
  }
}

TEST(NpyParse, RejectsMalformedFiles) {
  const std::string good = str(npy_fixtures::f32_2x3);
  expect_error("", "not a .npy file: it is empty");
  expect_error("hello, world", "expected magic \"\\x93NUMPY\", found \"hello,\"");
  expect_error(std::string("PK\x03\x04\x14\x00\x00\x00", 8), "is it an .npz?");
  expect_error(good.substr(0, 5), "truncated .npy header: file is 5 bytes");
  expect_error(good.substr(0, 9), "format 1.0 needs 10 before the header");
  expect_error(good.substr(0, 50), "it claims 118 bytes, the file has 40");
  std::string v4 = good;
  v4[6] = 4;
  expect_error(v4, "unsupported .npy format version 4.0 (qkv reads 1.0, 2.0 and 3.0)");
  expect_error(make_npy("{}", "", 2).replace(8, 4, "\xff\xff\xff\xff"), "implausible .npy header length");
  expect_error(make_npy("[1, 2]", ""), "header is not a dict: expected '{', found \"[1, 2]\"");
  expect_error(make_npy("{'descr': '<f4', 'fortran_order': False}", ""), "missing key 'shape'");
  expect_error(make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'foo': 1}", ""),
               "unexpected key 'foo'");
  expect_error(make_npy("{'descr': '<f4', 'descr': '<f4'}", ""), "key 'descr' appears twice");
  expect_error(make_npy("{'descr': '<f4, 'fortran_order': False}", ""), "expected ',' or '}' after the value");
  expect_error(make_npy("{'descr': '<f4", ""), "unterminated string");
  expect_error(make_npy("{'descr': '<f4', 'fortran_order': no, 'shape': ()}", ""), "expected True or False");
  expect_error(make_npy(dict("<f4", "(2, x)"), ""), "'shape': expected an integer or ')', found \"x)");
  expect_error(make_npy(dict("<f4", "[2, 3]"), ""), "'shape': expected a tuple such as (2, 3)");
  expect_error(make_npy(dict("<f4", "(2 3)"), ""), "expected ',' or ')' after a dimension");
  expect_error(make_npy(dict("<f4", "(2, -3)"), ""), "'shape': negative dimension -3");
  expect_error(make_npy(dict("<f4", "(99999999999999999999,)"), ""), "does not fit in 64 bits");
  expect_error(make_npy(dict("<f4", "(2,)") + " x", std::string(8, '\0')), "unexpected text after the dict");
  expect_error(make_npy(dict("<f4", "(4294967296, 4294967296)"), ""), "too many elements");
}

TEST(NpyParse, RejectsUnsupportedArrays) {
  expect_error(str(npy_fixtures::big_endian_i4), "unsupported dtype '>i4' (int32)");
  expect_error(str(npy_fixtures::int64), "unsupported dtype '<i8' (int64); qkv reads '<f4' float32");
  expect_error(str(npy_fixtures::float16), "unsupported dtype '<f2' (float16)");
  expect_error(str(npy_fixtures::complex64), "unsupported dtype '<c8' (complex64)");
  expect_error(str(npy_fixtures::object), "unsupported dtype '|O' (Python objects)");
  expect_error(str(npy_fixtures::structured), "structured dtypes (a list of fields in 'descr') are not supported");
  expect_error(make_npy(dict("=f4", "(1,)"), std::string(4, '\0')), "unsupported dtype '=f4' (float32)");
  // An item size whose bit count overflows an int was undefined behaviour in
  // the message (UBSan: 294967296 * 8); found by fuzz/fuzz_npy.
  expect_error(make_npy(dict("<i400000000", "(1,)"), std::string(4, '\0')),
               "unsupported dtype '<i400000000' (int); qkv reads");
  expect_error(make_npy(dict("<f99999999999999999999", "(1,)"), ""), "(float)");
}

TEST(NpyParse, RejectsWrongDataSize) {
  const std::string good = str(npy_fixtures::f32_2x3);
  expect_error(good.substr(0, good.size() - 4), "expects 24 bytes of data for shape [2, 3] float32, found 20");
  expect_error(good + "x", "expects 24 bytes of data for shape [2, 3] float32, found 25");
  // Must fail on the size check, not by trying to allocate 8 TB.
  expect_error(make_npy(dict("<f8", "(1000000000000,)"), ""),
               "expects 8000000000000 bytes of data for shape [1000000000000] float64, found 0");
  expect_error(make_npy(dict("<f8", "(4611686018427387904,)"), ""), "expects more than 2^64 bytes");
  expect_error(make_npy(dict("|b1", "(3,)"), std::string("\x01\x00\x02", 3)), "bool element 2 is byte 2, expected 0 or 1");
}

// Every prefix of a good file and many one-byte corruptions either parse or
// throw qkv::Error: nothing crashes, hangs or throws anything else.
TEST(NpyParse, SurvivesTruncationAndCorruption) {
  const std::string good = str(npy_fixtures::f32_2x3);
  for (size_t n = 0; n < good.size(); ++n) EXPECT_THROW(qkv::parse_npy(good.substr(0, n), "t"), qkv::Error) << n;
  for (size_t i = 0; i < 130; ++i) {
    for (char c : {'\0', '\xff', '(', ')', '{', '}', ',', '\'', '-', '9', ' ', 'L', '\\'}) {
      std::string bad = good;
      bad[i] = c;
      try {
        qkv::parse_npy(bad, "t");
      } catch (const qkv::Error&) {
      }
    }
  }
}

TEST_F(NpyFiles, RoundTripsEveryDtypeAndRank) {
  const std::vector<Shape> shapes = {{}, {3}, {0}, {2, 3}, {2, 0}, {2, 1, 3}, {0, 4, 5}, {1, 2, 3, 2}, {2, 0, 3, 1}};
  for (DType dt : {DType::f32, DType::f64, DType::boolean}) {
    for (const Shape& shape : shapes) {
      const Tensor t = sample(dt, shape);
      qkv::write_npy(path("a.npy"), t);
      expect_same(qkv::read_npy(path("a.npy")), t);
      const std::string bytes = qkv::npy_bytes(t);
      EXPECT_EQ((bytes.size() - t.nbytes()) % 64, 0u) << "header not padded to 64";
    }
  }
}

// np.save switches to format 2.0 when the header outgrows 1.0's 2-byte length.
TEST_F(NpyFiles, LongHeaderUsesVersion2) {
  const Tensor t(DType::f32, Shape(25000, 1));
  const std::string bytes = qkv::npy_bytes(t);
  EXPECT_EQ(bytes[6], 2);
  qkv::write_npy(path("long.npy"), t);
  expect_same(qkv::read_npy(path("long.npy")), t);
}

TEST_F(NpyFiles, WriteReplacesAtomicallyAndLeavesNoTemporaries) {
  qkv::write_npy(path("x.npy"), sample(DType::f64, {4}));
  qkv::write_npy(path("x.npy"), sample(DType::f32, {2, 2}));
  expect_same(qkv::read_npy(path("x.npy")), sample(DType::f32, {2, 2}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(NpyFiles, WriteFailuresNameThePathAndCleanUp) {
  const Tensor t = sample(DType::f32, {2});
  try {
    qkv::write_npy(path("missing/x.npy"), t);
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write '" + path("missing/x.npy") + "': No such file or directory"),
              std::string::npos) << e.what();
  }
  fs::create_directory(path("sub"));
  EXPECT_THROW(qkv::write_npy(path("sub"), t), qkv::Error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// Issue 10: a symlink is followed (its target replaced, the link kept), a
// FIFO is written in place (never replaced by a regular file), a failed
// write to a device is an error, a 254-byte name still fits its temporary,
// and a set of files is replaced all or none.
TEST_F(NpyFiles, WritesThroughSymlinksFifosAndDevices) {
  const Tensor t = sample(DType::f32, {2, 2});
  fs::create_directory(path("sub"));
  fs::create_symlink("sub/real.npy", path("link.npy"));
  qkv::write_npy(path("link.npy"), t);
  EXPECT_TRUE(fs::is_symlink(path("link.npy")));
  expect_same(qkv::read_npy(path("sub/real.npy")), t);

  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  const int reader = open(path("fifo").c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  qkv::write_npy(path("fifo"), t);  // 144 bytes: fits the pipe's buffer
  char buf[256];
  EXPECT_EQ(read(reader, buf, sizeof buf), static_cast<ssize_t>(qkv::npy_bytes(t).size()));
  close(reader);
  struct stat st;
  ASSERT_EQ(lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));

  fs::create_symlink("/dev/full", path("full.npy"));
  EXPECT_THROW(qkv::write_npy(path("full.npy"), t), qkv::Error);

  const std::string longest(250, 'a');  // + ".npy": 254 bytes, legal
  qkv::write_npy(path(longest + ".npy"), t);
  expect_same(qkv::read_npy(path(longest + ".npy")), t);
}

TEST_F(NpyFiles, FileSetReplacesAllOrNone) {
  std::ofstream(path("a")) << "old a";
  fs::create_directory(path("b"));  // in the way of the second file
  {
    qkv::FileSet files;
    files.stage(path("a"), {"new a"});
    EXPECT_THROW(files.stage(path("b"), {"new b"}), qkv::Error);
  }  // dropped uncommitted
  std::ifstream in(path("a"));
  std::string a((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(a, "old a");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2);  // no temporaries
  qkv::FileSet files;
  files.stage(path("a"), {"new ", "a"});
  files.stage(path("c"), {"c"});
  files.commit();
  std::ifstream again(path("a"));
  std::string a2((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  EXPECT_EQ(a2, "new a");
  EXPECT_TRUE(fs::exists(path("c")));
}

TEST_F(NpyFiles, ReadFailuresAreClear) {
  auto message = [](const std::string& p) -> std::string {
    try {
      qkv::read_npy(p);
    } catch (const qkv::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(path("nope.npy")), "cannot open '" + path("nope.npy") + "': No such file or directory");
  EXPECT_EQ(message(dir_.string()), "cannot read '" + dir_.string() + "': it is a directory");
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(message(path("fifo")), "cannot read '" + path("fifo") + "': not a regular file");
  std::ofstream(path("short.npy"), std::ios::binary) << str(npy_fixtures::f32_2x3).substr(0, 140);
  EXPECT_EQ(message(path("short.npy")),
            "'" + path("short.npy") + "': expects 24 bytes of data for shape [2, 3] float32, found 12");
}
