// The K-quants' reference dequantizers: 256-weight super-blocks of smaller
// sub-blocks, each sub-block with its own scale (and, for Q4_K and Q5_K, its
// own min), stored as small integers that one f16 d (and dmin) scales.
#include <cstdint>

#include "linalg/half.h"
#include "linalg/k_scales.h"
#include "linalg/rows.h"

namespace qkv::linalg {

// Q4_K, 144 bytes, 4.5 bits per weight; 8 sub-blocks of 32:
//   byte 0    2      4            16                               144
//        | d  | dmin | scales[12] | qs[128]                           |
//          f16  f16    (above)      4 chunks of 32 bytes; chunk c holds
//                                   sub-block 2c in its low nibbles and
//                                   2c + 1 in its high nibbles
//   x = (d * sc) * q - (dmin * m),  q in 0..15
void dequantize_q4_k(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 256; ++i, b += 144, out += 256) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t* qs = b + 16;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin s = scale_min(b + 4, j);
      const float dj = d * static_cast<float>(s.sc), mj = dmin * static_cast<float>(s.m);
      const uint8_t* chunk = qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) out[32 * j + l] = dj * static_cast<float>((chunk[l] >> shift) & 15) - mj;
    }
  }
}

// Q5_K, 176 bytes, 5.5 bits per weight; Q4_K plus a fifth bit per weight:
//   byte 0    2      4            16        48                      176
//        | d  | dmin | scales[12] | qh[32]  | qs[128]                 |
//                                   bit j of qh[l]: the high bit of weight
//                                   l of sub-block j; qs as in Q4_K
//   x = (d * sc) * q - (dmin * m),  q = nibble | high bit << 4, in 0..31
void dequantize_q5_k(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 256; ++i, b += 176, out += 256) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin s = scale_min(b + 4, j);
      const float dj = d * static_cast<float>(s.sc), mj = dmin * static_cast<float>(s.m);
      const uint8_t* chunk = qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int q = ((chunk[l] >> shift) & 15) | ((qh[l] >> j) & 1) << 4;
        out[32 * j + l] = dj * static_cast<float>(q) - mj;
      }
    }
  }
}

// Q6_K, 210 bytes, 6.5625 bits per weight; 16 sub-blocks of 16, each an
// int8 scale, and 6-bit weights stored as a low nibble and 2 high bits:
//   byte 0                 128          192           208   210
//        | ql[128]         | qh[64]     | scales[16]  | d   |
//                                         int8          f16
//   Two halves of 128 weights; half h uses ql[64h ..], qh[32h ..]. Its
//   weight 32k + l (quarter k = 0..3, l = 0..31) has
//     low 4 bits:  ql[64h + l + 32 (k % 2)], low nibble for k < 2, else high
//     high 2 bits: bits 2k, 2k + 1 of qh[32h + l]
//   x = (d * scales[w / 16]) * (q - 32),  w the weight's index in the block
void dequantize_q6_k(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 256; ++i, b += 210, out += 256) {
    const float d = f16_at(b + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    for (int w = 0; w < 256; ++w) {
      const int h = w / 128, k = (w % 128) / 32, l = w % 32;
      const int low = (b[64 * h + l + 32 * (k % 2)] >> (k < 2 ? 0 : 4)) & 15;
      const int high = (b[128 + 32 * h + l] >> (2 * k)) & 3;
      out[w] = d * static_cast<float>(scales[w / 16]) * static_cast<float>((low | high << 4) - 32);
    }
  }
}

}  // namespace qkv::linalg
