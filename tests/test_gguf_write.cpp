// The GGUF writer (qkv/gguf.h) read back by qkv's own reader, the staged
// file's producer failing half-way, and the mixes' per-tensor types
// (qkv/quantize.h) as llama-quantize chooses them. The gguf Python package
// and llama.cpp reading the written files: tests/python/test_quantize.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "io/files.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/quantize.h"
#include "qkv/weight_type.h"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("qkv_gguf_write_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

// The floats 0.5 * i - 3, i = 0 .. n-1, quantized as `type` (F32 bytes as they are).
GgufWriter::Fill quantized(WeightType type, int64_t n) {
  return [type, n](std::byte* out) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i) - 3;
    quantize_row(type, x.data(), out, n);
  };
}

}  // namespace

TEST(GgufWrite, MetadataAndTensorsReadBack) {
  const fs::path path = temp_dir() / "m.gguf";
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("a.u32", GgufValue::u32(4000000000u));
  w.set("a.i32", GgufValue::i32(-7));
  w.set("a.f32", GgufValue::f32(0.25f));
  w.set("a.bool", GgufValue::boolean(true));
  w.set("a.strings", GgufValue::strings({"x", "", "ünï"}));
  w.set("a.ints", GgufValue::i32s({1, -2, 3}));
  w.set("a.floats", GgufValue::f32s({1.5, -0.5}));
  GgufValue nested{GgufType::array, GgufType::array,
                   std::vector<GgufValue>{GgufValue::i32s({1}), GgufValue::strings({"y"})}};
  w.set("a.nested", nested);
  w.set("a.u64", GgufValue{GgufType::u64, GgufType::u8, uint64_t{1} << 40});
  w.add_tensor("t.f32", {3}, 0, quantized(WeightType::f32, 3));
  w.add_tensor("t.q8", {64, 2}, 8, quantized(WeightType::q8_0, 128));
  w.add_tensor("t.q6k", {256}, 14, quantized(WeightType::q6_k, 256));
  w.write(path.string());

  const GgufFile f = GgufFile::open(path.string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("a.u32"), 4000000000LL);
  EXPECT_EQ(f.find("a.u32")->type, GgufType::u32);
  EXPECT_EQ(f.get_int("a.i32"), -7);
  EXPECT_EQ(f.get_float("a.f32"), 0.25);
  EXPECT_TRUE(f.get_bool("a.bool"));
  EXPECT_EQ(f.get_strings("a.strings"), (std::vector<std::string>{"x", "", "ünï"}));
  EXPECT_EQ(f.get_ints("a.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_floats("a.floats"), (std::vector<double>{1.5, -0.5}));
  EXPECT_EQ(f.find("a.nested")->element_type, GgufType::array);
  EXPECT_EQ(std::get<std::vector<GgufValue>>(f.find("a.nested")->data).size(), 2u);
  EXPECT_EQ(f.get_int("a.u64"), int64_t{1} << 40);
  ASSERT_EQ(f.tensors().size(), 3u);
  for (const GgufTensor& t : f.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  const GgufTensor& q8 = *f.find_tensor("t.q8");
  EXPECT_EQ(q8.shape, (Shape{64, 2}));
  ASSERT_EQ(q8.bytes.size(), 4u * 34);
  std::vector<std::byte> want(q8.bytes.size());
  quantized(WeightType::q8_0, 128)(want.data());
  EXPECT_EQ(std::memcmp(q8.bytes.data(), want.data(), want.size()), 0);
  std::vector<float> f32(3);
  dequantize_row(WeightType::f32, f.find_tensor("t.f32")->bytes.data(), f32.data(), 3);
  EXPECT_EQ(f32, (std::vector<float>{-3.0f, -2.5f, -2.0f}));
  fs::remove_all(path.parent_path());
}

// This process's resident memory, in bytes (/proc/self/statm).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A tensor released after it was read leaves the process's resident memory
// and reads back the same; a parse()d file's bytes are its own, and stay.
TEST(GgufWrite, ReleasedTensorsLeaveResidentMemoryAndReadBackTheSame) {
  const fs::path path = temp_dir() / "release.gguf";
  constexpr int64_t n = int64_t{8} << 20;  // 8 MiB of F32 bytes
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.add_tensor("big", {n / 4}, 0, [](std::byte* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(i * 7 % 251);
  });
  w.write(path.string());
  const std::string copy = read_file(path.string());
  for (const GgufFile& f : {GgufFile::open(path.string()), GgufFile::parse(copy, "copy.gguf")}) {
    SCOPED_TRACE(f.name());
    const std::span<const std::byte> bytes = f.find_tensor("big")->bytes;
    int64_t sum = 0;
    for (size_t i = 0; i < bytes.size(); i += 64) sum += static_cast<int64_t>(bytes[i]);  // every page resident
    const int64_t before = resident_bytes();
    f.release(bytes);
    const int64_t after = resident_bytes();
    if (f.name() == "copy.gguf")
      EXPECT_GT(after, before - (int64_t{1} << 20)) << "a parsed file's own bytes were dropped";
    else
      EXPECT_LT(after, before - (int64_t{7} << 20)) << "the released pages are still resident";
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bytes[static_cast<size_t>(i)], static_cast<std::byte>(i * 7 % 251)) << "byte " << i;
    EXPECT_GT(sum, 0);
  }
}

TEST(GgufWrite, AlignmentFromMetadata) {
  const fs::path path = temp_dir() / "a.gguf";
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(64));
  w.add_tensor("a", {5}, 0, quantized(WeightType::f32, 5));
  w.add_tensor("b", {7}, 0, quantized(WeightType::f32, 7));
  w.write(path.string());
  const GgufFile f = GgufFile::open(path.string());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.find_tensor("b")->offset, 64u);
  fs::remove_all(path.parent_path());
}

TEST(GgufWrite, RefusesWhatTheFormatCannotHold) {
  GgufWriter w;
  w.set("k", GgufValue::u32(1));
  EXPECT_THROW(w.set("k", GgufValue::u32(2)), Error);
  EXPECT_THROW(w.set("general.alignment", GgufValue::u32(48)), Error);
  EXPECT_THROW(w.set("general.alignment", GgufValue::string("32")), Error);
  w.add_tensor("t", {32}, 8, quantized(WeightType::q8_0, 32));
  EXPECT_THROW(w.add_tensor("t", {32}, 8, quantized(WeightType::q8_0, 32)), Error);     // twice
  EXPECT_THROW(w.add_tensor("u", {48}, 8, quantized(WeightType::q8_0, 48)), Error);     // not whole blocks
  EXPECT_THROW(w.add_tensor("v", {32}, 4, quantized(WeightType::q8_0, 32)), Error);     // no such ggml type
  EXPECT_THROW(w.add_tensor("x", {32, 0}, 0, quantized(WeightType::f32, 0)), Error);    // an empty dim
  EXPECT_THROW(w.add_tensor("y", {1, 1, 1, 1, 1}, 0, quantized(WeightType::f32, 1)), Error);
  GgufWriter bad;
  bad.set("k", GgufValue{GgufType::u32, GgufType::u8, std::string("not a number")});
  EXPECT_THROW(bad.write((temp_dir() / "bad.gguf").string()), Error);
  EXPECT_FALSE(fs::exists(temp_dir() / "bad.gguf"));
  for (GgufValue v : {GgufValue::i32s({1, int64_t{1} << 40}), GgufValue{GgufType::u8, GgufType::u8, uint64_t{256}},
                      GgufValue{GgufType::i16, GgufType::u8, int64_t{-40000}}}) {
    GgufWriter narrow;
    narrow.set("k", v);
    try {
      narrow.write((temp_dir() / "narrow.gguf").string());
      ADD_FAILURE() << "a value outside its type was written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(temp_dir());
}

TEST(GgufWrite, AFailedFillLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = temp_dir(), path = dir / "m.gguf";
  { std::ofstream(path) << "old"; }
  GgufWriter w;
  w.add_tensor("a", {4}, 0, quantized(WeightType::f32, 4));
  w.add_tensor("b", {4}, 0, [](std::byte*) { throw Error("no more weights"); });
  EXPECT_THROW(w.write(path.string()), Error);
  std::ifstream in(path);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "old");
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);  // the temporary is gone
  fs::remove_all(dir);
}

TEST(QuantMix, NamesAndFileTypes) {
  EXPECT_EQ(quant_mix_from_name("Q4_K_M"), QuantMix::q4_k_m);
  EXPECT_STREQ(quant_mix_name(QuantMix::q5_k_m), "q5_k_m");
  EXPECT_EQ(quant_mix_file_type(QuantMix::q8_0), 7u);
  EXPECT_EQ(quant_mix_file_type(QuantMix::q4_k_m), 15u);
  try {
    quant_mix_from_name("q3_k_s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_k_m"), std::string::npos) << e.what();
  }
}

TEST(QuantMix, TypesAsLlamaQuantizeChooses) {
  const int64_t L = 22;  // TinyLlama: more bits in layers 0-1, 19-21 and 4, 7, ..., 16
  auto t = [&](QuantMix mix, const std::string& name, int64_t ne0 = 2048, int dims = 2, bool tied = false) {
    return quant_mix_type(mix, name, ne0, dims, L, tied);
  };
  for (const QuantMix mix : {QuantMix::q8_0, QuantMix::q4_0, QuantMix::q4_k_m, QuantMix::q5_k_m, QuantMix::q6_k}) {
    EXPECT_EQ(t(mix, "blk.0.attn_norm.weight", 2048, 1), WeightType::f32);
    EXPECT_EQ(t(mix, "blk.0.attn_q.bias", 2048, 1), WeightType::f32);
    EXPECT_EQ(t(mix, "position_embd.weight"), WeightType::f32);
  }
  EXPECT_EQ(t(QuantMix::q8_0, "output.weight"), WeightType::q8_0);
  EXPECT_EQ(t(QuantMix::q4_0, "output.weight"), WeightType::q6_k);
  EXPECT_EQ(t(QuantMix::q4_0, "token_embd.weight"), WeightType::q4_0);
  EXPECT_EQ(t(QuantMix::q4_0, "token_embd.weight", 2048, 2, true), WeightType::q6_k);  // tied: the head
  EXPECT_EQ(t(QuantMix::q4_k_m, "token_embd.weight"), WeightType::q4_k);
  EXPECT_EQ(t(QuantMix::q4_k_m, "blk.5.attn_q.weight"), WeightType::q4_k);
  for (int64_t l = 0; l < L; ++l) {
    const bool more = l < 2 || l >= 19 || (l - 2) % 3 == 2;
    const std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(t(QuantMix::q4_k_m, b + "attn_v.weight"), more ? WeightType::q6_k : WeightType::q4_k) << l;
    EXPECT_EQ(t(QuantMix::q4_k_m, b + "ffn_down.weight"), more ? WeightType::q6_k : WeightType::q4_k) << l;
    EXPECT_EQ(t(QuantMix::q5_k_m, b + "attn_qkv.weight"), more ? WeightType::q6_k : WeightType::q5_k) << l;
    EXPECT_EQ(t(QuantMix::q4_k_m, b + "ffn_up.weight"), WeightType::q4_k) << l;
    EXPECT_EQ(t(QuantMix::q6_k, b + "attn_v.weight"), WeightType::q6_k) << l;
  }
  // Rows that are not whole blocks fall back as llama-quantize's do.
  EXPECT_EQ(t(QuantMix::q6_k, "blk.3.ffn_up.weight", 96), WeightType::q8_0);
  EXPECT_EQ(t(QuantMix::q4_k_m, "output.weight", 96), WeightType::q8_0);
  EXPECT_EQ(t(QuantMix::q4_k_m, "blk.3.ffn_up.weight", 96), WeightType::q5_0);
  EXPECT_EQ(t(QuantMix::q5_k_m, "blk.3.ffn_up.weight", 96), WeightType::q5_1);
  EXPECT_EQ(t(QuantMix::q4_k_m, "blk.0.ffn_down.weight", 96), WeightType::q8_0);  // Q6_K's
  EXPECT_EQ(t(QuantMix::q8_0, "blk.3.ffn_up.weight", 40), WeightType::f16);
}
