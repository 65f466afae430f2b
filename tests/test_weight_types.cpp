// The weight-type table and its reference rows: the table against the GGUF
// format's layouts, known-answer blocks packed here from the byte diagrams
// (every field at a value of its own, so a misplaced bit shows), the Q8_0
// and Q4_0 quantizers' bits and round trips, and the checks on n.
// tests/numpy/test_gguf.py compares every type with the gguf package.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "linalg/half.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/weight_type.h"

using qkv::WeightType;

namespace {

std::vector<float> dequantize(WeightType t, const std::vector<uint8_t>& blocks) {
  const qkv::WeightTypeInfo& w = qkv::weight_type_info(t);
  const int64_t n = static_cast<int64_t>(blocks.size() / w.block_bytes) * w.block;
  std::vector<float> out(static_cast<size_t>(n));
  qkv::dequantize_row(t, blocks.data(), out.data(), n);
  return out;
}

std::vector<uint8_t> quantize(WeightType t, const std::vector<float>& x) {
  std::vector<uint8_t> blocks(qkv::weight_bytes(t, static_cast<int64_t>(x.size())));
  qkv::quantize_row(t, x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  return blocks;
}

void put_f16(std::vector<uint8_t>& b, size_t at, uint16_t h) {
  b[at] = static_cast<uint8_t>(h);
  b[at + 1] = static_cast<uint8_t>(h >> 8);
}

// Q4_K's and Q5_K's 12 scale bytes from 8 six-bit scales and mins.
void pack_scales(uint8_t* s, const int sc[8], const int m[8]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | (m[j + 4] >> 4) << 6);
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
}

constexpr int kSc[8] = {1, 2, 3, 63, 17, 33, 48, 62};
constexpr int kMin[8] = {0, 5, 62, 7, 16, 31, 47, 63};

}  // namespace

TEST(WeightTypes, TableAgreesWithTheGgufLayouts) {
  ASSERT_EQ(qkv::weight_types().size(), 10u);
  uint32_t last = 0;
  for (const qkv::WeightTypeInfo& t : qkv::weight_types()) {
    const auto id = static_cast<uint32_t>(t.type);
    const qkv::GgmlTypeLayout* g = qkv::ggml_type_layout(id);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_STREQ(g->name, t.name);
    EXPECT_EQ(g->block, t.block) << t.name;
    EXPECT_EQ(g->block_bytes, t.block_bytes) << t.name;
    EXPECT_TRUE(id == 0 || id > last) << "in ggml's order";
    last = id;
    EXPECT_EQ(qkv::weight_type_from_ggml(id), &t);
    EXPECT_EQ(t.quantize != nullptr, t.type != WeightType::bf16) << t.name;
  }
  EXPECT_EQ(qkv::weight_type_from_ggml(3), nullptr);  // Q4_1: ggml's, not qkv's
  EXPECT_THROW(qkv::weight_type_info(static_cast<WeightType>(3)), qkv::Error);
}

TEST(WeightTypes, UnquantizedRows) {
  const std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c, 0x01, 0x00, 0x00, 0x80};
  const std::vector<float> h = dequantize(WeightType::f16, f16);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], INFINITY);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::signbit(h[4]) && h[4] == 0.0f);
  const std::vector<float> b = dequantize(WeightType::bf16, {0x80, 0x3f, 0x49, 0xc0});
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -3.140625f);
  const float x[2] = {1.5f, -0.25f};
  std::vector<uint8_t> f32(8);
  std::memcpy(f32.data(), x, 8);
  EXPECT_EQ(dequantize(WeightType::f32, f32), (std::vector<float>{1.5f, -0.25f}));
}

TEST(WeightTypes, Q8_0AndQ4_0KnownBlocks) {
  std::vector<uint8_t> q8(34);
  put_f16(q8, 0, 0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  const std::vector<float> y8 = dequantize(WeightType::q8_0, q8);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y8[j], 0.5f * static_cast<float>(j * 8 - 128)) << j;

  std::vector<uint8_t> q4(18);
  put_f16(q4, 0, 0x4000);  // d = 2
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const std::vector<float> y4 = dequantize(WeightType::q4_0, q4);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y4[j], 2.0f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y4[j + 16], 2.0f * static_cast<float>(7 - j)) << j;
  }
}

// Q5_0 and Q5_1: weight j's nibble in byte j % 16 of qs (low for j < 16),
// its fifth bit bit j of qh (little-endian). Here q[j] = j, so that qh's
// bits are 0xffff0000 and the fifth bit shows in the second half only.
TEST(WeightTypes, Q5_0AndQ5_1KnownBlocks) {
  for (const WeightType t : {WeightType::q5_0, WeightType::q5_1}) {
    const bool offset = t == WeightType::q5_1;
    const size_t qh = offset ? 4 : 2;
    std::vector<uint8_t> b(offset ? 24 : 22);
    put_f16(b, 0, 0x4000);                 // d = 2
    if (offset) put_f16(b, 2, 0xbc00);     // m = -1
    b[qh + 2] = b[qh + 3] = 0xff;          // bits 16..31
    for (int j = 0; j < 16; ++j) b[qh + 4 + static_cast<size_t>(j)] = static_cast<uint8_t>(j | j << 4);
    const std::vector<float> y = dequantize(t, b);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], offset ? 2.0f * static_cast<float>(j) - 1.0f : 2.0f * static_cast<float>(j - 16)) << qkv::weight_type_info(t).name << " " << j;
  }
}

TEST(WeightTypes, Q4_KAndQ5_KKnownBlocks) {
  // Weight l of sub-block j: 4 low bits (j * 5 + l) % 16; Q5_K's fifth bit
  // set where (j + l) % 3 == 0.
  auto low = [](int j, int l) { return (j * 5 + l) % 16; };
  auto high = [](int j, int l) { return (j + l) % 3 == 0 ? 1 : 0; };
  for (const WeightType t : {WeightType::q4_k, WeightType::q5_k}) {
    const bool five = t == WeightType::q5_k;
    std::vector<uint8_t> b(five ? 176 : 144);
    put_f16(b, 0, 0x3400);  // d = 0.25
    put_f16(b, 2, 0x3c00);  // dmin = 1
    pack_scales(&b[4], kSc, kMin);
    const size_t qs = five ? 48 : 16;
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) {
        b[qs + 32 * (j / 2) + l] |= static_cast<uint8_t>(low(j, l) << (4 * (j % 2)));
        if (five) b[16 + l] |= static_cast<uint8_t>(high(j, l) << j);
      }
    const std::vector<float> y = dequantize(t, b);
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) {
        const int q = low(j, l) + (five ? 16 * high(j, l) : 0);
        EXPECT_EQ(y[32 * j + l], 0.25f * kSc[j] * q - 1.0f * kMin[j]) << "sub-block " << j << " weight " << l;
      }
  }
}

TEST(WeightTypes, Q6_KKnownBlock) {
  // Weight w: q = (w * 7) % 64; sub-block s's scale 3 s - 20; d = 0.5.
  std::vector<uint8_t> b(210);
  for (int w = 0; w < 256; ++w) {
    const int q = (w * 7) % 64, h = w / 128, k = (w % 128) / 32, l = w % 32;
    b[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>((q & 15) << (k < 2 ? 0 : 4));
    b[128 + 32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(3 * s - 20));
  put_f16(b, 208, 0x3800);
  const std::vector<float> y = dequantize(WeightType::q6_k, b);
  for (int w = 0; w < 256; ++w)
    EXPECT_EQ(y[w], 0.5f * static_cast<float>(3 * (w / 16) - 20) * static_cast<float>((w * 7) % 64 - 32)) << w;
}

TEST(WeightTypes, BlocksAtAnyAddress) {
  std::mt19937 gen(3);
  for (const qkv::WeightTypeInfo& t : qkv::weight_types()) {
    std::vector<uint8_t> b(2 * t.block_bytes * static_cast<size_t>(256 / t.block) + 1);
    for (uint8_t& x : b) x = static_cast<uint8_t>(gen() & 0x3b);  // no f16 exponent of 31
    const int64_t n = 2 * 256;
    std::vector<float> aligned(n), shifted(n);
    std::vector<uint8_t> copy(b.begin() + 1, b.end());
    qkv::dequantize_row(t.type, b.data() + 1, shifted.data(), n);
    qkv::dequantize_row(t.type, copy.data(), aligned.data(), n);
    EXPECT_EQ(std::memcmp(aligned.data(), shifted.data(), n * sizeof(float)), 0) << t.name;
  }
}

// all_finite agrees with the dequantized row: for every type, one or two
// bytes of the middle of three blocks' worth of values set to all ones
// (an f16 or float exponent of all ones where they land on one, or a plain
// 6-bit scale or quant where they do not) make it false exactly where a
// dequantized weight is no longer finite.
TEST(WeightTypes, AllFiniteAgreesWithTheDequantizedRow) {
  std::mt19937 gen(5);
  for (const qkv::WeightTypeInfo& t : qkv::weight_types()) {
    const int64_t per = t.block == 1 ? 256 : t.block, n = 3 * per;
    const size_t block_bytes = t.block_bytes * static_cast<size_t>(per / t.block);
    std::vector<uint8_t> row(3 * block_bytes);
    for (uint8_t& x : row) x = static_cast<uint8_t>(gen() & 0x3b);  // no exponent of all ones
    ASSERT_TRUE(qkv::all_finite(t.type, row.data(), n)) << t.name;
    std::vector<float> out(static_cast<size_t>(n));
    int flagged = 0;
    for (int width : {1, 2})
      for (size_t j = 0; j + width <= block_bytes; ++j) {
        std::vector<uint8_t> bad = row;
        std::memset(bad.data() + block_bytes + j, 0xff, static_cast<size_t>(width));
        qkv::dequantize_row(t.type, bad.data(), out.data(), n);
        bool finite = true;
        for (float v : out) finite = finite && std::isfinite(v);
        EXPECT_EQ(qkv::all_finite(t.type, bad.data(), n), finite) << t.name << ", " << width << " bytes at " << j;
        flagged += !finite;
      }
    EXPECT_GT(flagged, 0) << t.name;
  }
}

TEST(WeightTypes, QuantizersKnownBlocks) {
  // d = 127 / 127 = 1: q is x rounded half away from zero.
  std::vector<float> x(32, 0.0f);
  const float v[] = {127, -0.5f, 0.5f, 1.5f, -2.5f, 2.49f, -126.7f, 3.5f};
  std::copy(std::begin(v), std::end(v), x.begin());
  std::vector<uint8_t> q8 = quantize(WeightType::q8_0, x);
  EXPECT_EQ(q8[0] | q8[1] << 8, 0x3c00);
  const int want8[] = {127, -1, 1, 2, -3, 2, -127, 4};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(static_cast<int8_t>(q8[2 + j]), want8[j]) << j;

  // The largest magnitude is -8: d = 1, q = trunc(x + 8.5), at most 15.
  std::vector<float> y(32, 0.0f);
  const float w[] = {-8, 7, 7.6f, 0.4f, 0.5f, -0.6f};
  std::copy(std::begin(w), std::end(w), y.begin());
  y[16] = -7.5f;
  y[17] = 1.0f;
  std::vector<uint8_t> q4 = quantize(WeightType::q4_0, y);
  EXPECT_EQ(q4[0] | q4[1] << 8, 0x3c00);
  const int want4[] = {0, 15, 15, 8, 9, 7};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(q4[2 + j] & 15, want4[j]) << j;
  EXPECT_EQ(q4[2] >> 4, 1);  // y[16]: trunc(1.0)
  EXPECT_EQ(q4[3] >> 4, 9);  // y[17]

  // A positive largest magnitude makes d negative: the first of +-8 wins.
  y.assign(32, 0.0f);
  y[3] = 8;
  y[5] = -8;
  q4 = quantize(WeightType::q4_0, y);
  EXPECT_EQ(q4[0] | q4[1] << 8, 0xbc00);  // d = -1
  EXPECT_EQ(q4[5] & 15, 0);               // 8 -> q 0
  EXPECT_EQ(q4[7] & 15, 15);              // -8 -> trunc(16.5), at most 15

  // All zero: d = 0, q = 0 (Q8_0); Q4_0's d = 0 / -8 is -0 (f16 0x8000,
  // as in ggml), q = 8.
  const std::vector<float> zero(32, 0.0f);
  EXPECT_EQ(quantize(WeightType::q8_0, zero), std::vector<uint8_t>(34, 0));
  std::vector<uint8_t> q4zero(18, 0x88);
  q4zero[0] = 0x00;
  q4zero[1] = 0x80;
  EXPECT_EQ(quantize(WeightType::q4_0, zero), q4zero);
}

TEST(WeightTypes, QuantizeDequantizeRoundTrips) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(32 * 200);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(gen) * (i / 32 % 3 == 0 ? 100.0f : 0.01f);
  // Q8_0 rounds to d / 2, plus d's own rounding to f16 (2^-11 of 127 d).
  // Q4_0 rounds to d / 2, except the end opposite the largest magnitude,
  // clipped from 8 d to 7 d.
  for (const auto& [t, bound] : {std::pair{WeightType::q8_0, 0.5f + 127.0f / 2048},
                                 std::pair{WeightType::q4_0, 1.0f + 8.0f / 2048}}) {
    const std::vector<float> y = dequantize(t, quantize(t, x));
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
      const float d = amax / (t == WeightType::q8_0 ? 127.0f : 8.0f);
      for (int j = 0; j < 32; ++j)
        ASSERT_LE(std::fabs(y[32 * b + j] - x[32 * b + j]), bound * d) << "block " << b << " weight " << j;
    }
  }
}

TEST(WeightTypes, HalfRoundsToNearestEven) {
  using qkv::linalg::half_from_float;
  EXPECT_EQ(half_from_float(1.0f), 0x3c00);
  EXPECT_EQ(half_from_float(1.0f + 0x1p-11f), 0x3c00);      // tie: to the even 1.0
  EXPECT_EQ(half_from_float(1.0f + 0x3p-11f), 0x3c02);      // tie: up to the even
  EXPECT_EQ(half_from_float(65504.0f), 0x7bff);
  EXPECT_EQ(half_from_float(65519.996f), 0x7bff);
  EXPECT_EQ(half_from_float(65520.0f), 0x7c00);             // tie past the largest: inf
  EXPECT_EQ(half_from_float(-1e9f), 0xfc00);
  EXPECT_EQ(half_from_float(0x1p-24f), 0x0001);             // the smallest subnormal
  EXPECT_EQ(half_from_float(0x1p-25f), 0x0000);             // tie: to the even 0
  EXPECT_EQ(half_from_float(0x3p-25f), 0x0002);             // 1.5 ulp: tie to the even 2
  EXPECT_EQ(half_from_float(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up to the smallest normal
  EXPECT_EQ(half_from_float(-0.0f), 0x8000);
  EXPECT_EQ(half_from_float(NAN), 0x7e00);
}

TEST(WeightTypes, CountsMustFillBlocks) {
  std::vector<float> out(64);
  std::vector<uint8_t> blocks(68);
  try {
    qkv::dequantize_row(WeightType::q8_0, blocks.data(), out.data(), 33);
    ADD_FAILURE() << "33 weights of Q8_0 accepted";
  } catch (const qkv::Error& e) {
    EXPECT_STREQ(e.what(), "Q8_0 weights: expected a count that is a multiple of its block of 32, found 33");
  }
  EXPECT_THROW(qkv::weight_bytes(WeightType::q4_k, -256), qkv::Error);
  EXPECT_EQ(qkv::weight_bytes(WeightType::q6_k, 512), 420u);
  EXPECT_EQ(qkv::weight_bytes(WeightType::bf16, 3), 6u);
  try {
    qkv::quantize_row(WeightType::bf16, out.data(), blocks.data(), 0);
    ADD_FAILURE() << "BF16 quantized";
  } catch (const qkv::Error& e) {
    EXPECT_STREQ(e.what(), "quantize_row: expected a type qkv can quantize to (F32, F16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), found BF16");
  }
}
