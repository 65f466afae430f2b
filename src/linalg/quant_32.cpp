// Q8_0, Q4_0, Q5_0 and Q5_1: 32 weights per block, an f16 scale d each
// (and Q5_1's f16 offset m). The reference dequantizers, and ggml's
// reference quantizers (quantize_row_q8_0_ref, ..._q4_0_ref, ..._q5_0_ref,
// ..._q5_1_ref: the same bits, so that a file qkv writes matches one ggml
// writes from the same floats).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "linalg/half.h"
#include "linalg/rows.h"

namespace qkv::linalg {
namespace {

// v as an integer within [lo, hi], NaN as 0. Only a block of tiny weights
// (d below 2^-128, whose 1 / d overflows to inf) or of non-finite ones gives
// a v outside the range, where a plain cast would be undefined; such a
// block's d is 0, inf or NaN in f16, so its q do not matter.
int clamp_to(float v, int lo, int hi) {
  return std::isnan(v) ? 0 : static_cast<int>(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// The block's weight of largest magnitude, with its sign (the first, on a
// tie): Q4_0's and Q5_0's scale maps it to the lowest level, as ggml's.
float largest_magnitude(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

}  // namespace

// Q8_0, 34 bytes, 8.5 bits per weight:
//   byte 0      2                                  34
//        | d    | q[0] q[1] ...               q[31] |
//          f16    int8 each
//   x[j] = q[j] * d
void dequantize_q8_0(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 34, out += 32) {
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

// d = max |x| / 127, q = x * (1 / d) rounded half away from zero (roundf):
// the largest magnitude maps to +-127. q comes from d's float32 value,
// before d is rounded to f16, as in ggml (whose max, a > b ? a : b, this is).
void quantize_q8_0(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 34, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, half_from_float(d));
    for (int j = 0; j < 32; ++j)
      b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(clamp_to(std::round(x[j] * id), -127, 127)));
  }
}

// Q4_0, 18 bytes, 4.5 bits per weight:
//   byte 0      2                                  18
//        | d    | qs[0] qs[1] ...            qs[15] |
//          f16    qs[j] = q[j] | q[j + 16] << 4 (low nibble: the first half)
//   x[j] = (q[j] - 8) * d,  q in 0..15
void dequantize_q4_0(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 18, out += 32) {
    const float d = f16_at(b);
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>((b[2 + j] & 15) - 8) * d;
      out[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
    }
  }
}

// d = m / -8, m the weight of largest magnitude (the first, on a tie), so m
// itself maps to q = 0 and the other end of the range reaches q = 15;
// q = trunc(x * (1 / d) + 8.5), at most 15.
void quantize_q4_0(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 18, x += 32) {
    const float d = largest_magnitude(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, half_from_float(d));
    auto q = [&](int j) { return clamp_to(std::trunc(x[j] * id + 8.5f), 0, 15); };
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(q(j) | q(j + 16) << 4);
  }
}

void unpack_q5(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  const uint32_t qh = static_cast<uint32_t>(qh_bytes[0] | qh_bytes[1] << 8 | qh_bytes[2] << 16) |
                      static_cast<uint32_t>(qh_bytes[3]) << 24;
  for (int j = 0; j < 32; ++j) {
    const int nibble = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    q[j] = nibble | static_cast<int>((qh >> j) & 1) << 4;
  }
}

namespace {

// The 32 q (0..31) into qh (fifth bits) and qs (nibbles, as Q4_0's): unpack_q5's inverse.
void put_q5(const int* q, uint8_t* qh_bytes, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh_bytes[k] = static_cast<uint8_t>(qh >> (8 * k));
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
}

}  // namespace

// Q5_0, 22 bytes, 5.5 bits per weight:
//   byte 0      2      6                            22
//        | d    | qh   | qs[0] ...           qs[15] |
//          f16    bit j: q[j]'s fifth bit; qs as Q4_0's nibbles
//   x[j] = (q[j] - 16) * d,  q in 0..31
void dequantize_q5_0(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 22, out += 32) {
    const float d = f16_at(b);
    int q[32];
    unpack_q5(b + 2, b + 6, q);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j] - 16) * d;
  }
}

// As Q4_0's, over 32 levels: d = m / -16, q = trunc(x * (1 / d) + 16.5),
// at most 31.
void quantize_q5_0(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 22, x += 32) {
    const float d = largest_magnitude(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, half_from_float(d));
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = clamp_to(std::trunc(x[j] * id + 16.5f), 0, 31);
    put_q5(q, b + 2, b + 6);
  }
}

// Q5_1, 24 bytes, 6 bits per weight:
//   byte 0      2      4      8                            24
//        | d    | m    | qh   | qs[0] ...           qs[15] |
//          f16    f16    as Q5_0's
//   x[j] = q[j] * d + m,  q in 0..31
void dequantize_q5_1(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 24, out += 32) {
    const float d = f16_at(b), m = f16_at(b + 2);
    int q[32];
    unpack_q5(b + 4, b + 8, q);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * d + m;
  }
}

// m = min x, d = (max x - m) / 31, q = trunc((x - m) * (1 / d) + 0.5),
// kept to its low five bits as ggml's cast to uint8_t keeps them.
void quantize_q5_1(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 24, x += 32) {
    float min = x[0], max = x[0];
    for (int j = 1; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, half_from_float(d));
    put_f16(b + 2, half_from_float(min));
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = clamp_to(std::trunc((x[j] - min) * id + 0.5f), 0, 255);
    put_q5(q, b + 4, b + 8);
  }
}

}  // namespace qkv::linalg
