// flash_avx512bf16.cpp: Q·Kᵀ for bfloat16 inputs with vdpbf16ps (contract in
// flash_bf16.h; P·V is in pv_avx512bf16.cpp). Compiled with -mavx512f ... -mavx512bf16 (CMakeLists.txt);
// only ever called after qkv::active_isa() said the CPU has AVX512-BF16.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/kernels/flash_bf16.h"

namespace qkv::kernels {
namespace {

// One key's pair t of bf16 as a 32-bit word; the last pair of an odd D
// reads one element only (the row may end there).
inline int pair_at(const uint16_t* k, int64_t t, int64_t D) {
  uint32_t w;
  if (2 * t + 1 < D)
    std::memcpy(&w, k + 2 * t, sizeof w);
  else
    w = k[2 * t];
  return static_cast<int>(w);
}

// Keys [0, JB) x query vectors [0, IV) of 16 columns: JB x IV accumulators,
// each step loads IV query vectors and broadcasts one word per key. The
// float32 kernel's block (6 x 4) keeps 24 accumulators + 4 query vectors in
// the 32 zmm registers; each vdpbf16ps does two multiply-adds per lane.
template <int JB, int IV>
inline void qk_block(float* St, const uint16_t* K, int64_t ldk, const uint32_t* Qt2, int64_t D,
                     float scale) {
  const int64_t pairs = bf16_pairs(D);
  const int64_t whole = D / 2;  // pairs read as one word from every row
  // Every loop over a or b unrolled by pragma: left to the late unroller,
  // GCC kept acc on the stack outside the t loop (zeroed there, reloaded
  // before it, stored after it and reloaded to scale).
  __m512 acc[JB][IV];
#pragma GCC unroll 8
  for (int a = 0; a < JB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < IV; ++b) acc[a][b] = _mm512_setzero_ps();
  for (int64_t t = 0; t < pairs; ++t) {
    __m512bh q[IV];
#pragma GCC unroll 4
    for (int b = 0; b < IV; ++b)
      q[b] = (__m512bh)_mm512_loadu_si512(Qt2 + t * kBR + b * 16);
#pragma GCC unroll 8
    for (int a = 0; a < JB; ++a) {
      int w;
      if (t < whole)
        std::memcpy(&w, K + a * ldk + 2 * t, sizeof w);
      else
        w = pair_at(K + a * ldk, t, D);
      const __m512bh k = (__m512bh)_mm512_set1_epi32(w);
#pragma GCC unroll 4
      for (int b = 0; b < IV; ++b) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], k, q[b]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int a = 0; a < JB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < IV; ++b) _mm512_storeu_ps(St + a * kBR + b * 16, _mm512_mul_ps(acc[a][b], s));
}

template <int IV>
void qk_columns(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint32_t* Qt2,
                int64_t D, float scale) {
  constexpr int JB = 6;
  int64_t j = 0;
  for (; j + JB <= nj; j += JB) qk_block<JB, IV>(St + j * kBR, K + j * ldk, ldk, Qt2, D, scale);
  float* s = St + j * kBR;
  const uint16_t* k = K + j * ldk;
  switch (nj - j) {
    case 0: break;
    case 1: qk_block<1, IV>(s, k, ldk, Qt2, D, scale); break;
    case 2: qk_block<2, IV>(s, k, ldk, Qt2, D, scale); break;
    case 3: qk_block<3, IV>(s, k, ldk, Qt2, D, scale); break;
    case 4: qk_block<4, IV>(s, k, ldk, Qt2, D, scale); break;
    default: qk_block<5, IV>(s, k, ldk, Qt2, D, scale); break;
  }
}

// Element k of 128-bit lane L of the result is the sum of the four elements
// in lane L of the k-th argument (a, b, c, d): their horizontal sums, a
// quarter of the way done.
__attribute__((always_inline)) inline __m512 lane_sums4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  return _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
}

// Lane i of the result is the sum of the 16 lanes of x[i]: 45 shuffles and
// adds for all 16, against ~8 each for _mm512_reduce_add_ps one by one.
// Every index is a literal: with loops here GCC saw x indexed by a variable
// when it decides what lives in registers, and kept the caller's
// accumulators in memory (zeroed there, stored after the loop, reloaded).
__attribute__((always_inline)) inline __m512 sum16(const __m512 (&x)[16]) {
  const __m512 quad[4] = {lane_sums4(x[0], x[1], x[2], x[3]), lane_sums4(x[4], x[5], x[6], x[7]),
                          lane_sums4(x[8], x[9], x[10], x[11]), lane_sums4(x[12], x[13], x[14], x[15])};
  // Add the four 128-bit lanes of each quad: a 4 x 4 transpose of lanes.
  const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(quad[0], quad[1], 0x44),
                                   _mm512_shuffle_f32x4(quad[0], quad[1], 0xEE));
  const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(quad[2], quad[3], 0x44),
                                   _mm512_shuffle_f32x4(quad[2], quad[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// KB keys x R rows of the decode form, vectors of 32 bf16 along D. With
// KB * R <= 16 the accumulators reduce together (sum16) and land in
// St[a][r]. The last 1-31 elements of D (when D is not a multiple of 32) are
// copied with masked loads into a zero-padded block first, and the loop's
// last step reads that block instead of K: one loop body, no mask in it.
template <int KB, int R>
inline void qk_rows_block(float* St, const uint16_t* K, int64_t ldk, const uint16_t* Q, int64_t D,
                          float scale) {
  static_assert(KB * R <= 16, "one sum16 per block");
  const int64_t ld = bf16_row_pad(D), whole = D / 32 * 32;
  alignas(64) uint16_t tail[KB][32];
  if (whole < D) {
    const __mmask32 m = (__mmask32{1} << (D - whole)) - 1;
    for (int a = 0; a < KB; ++a) _mm512_store_si512(tail[a], _mm512_maskz_loadu_epi16(m, K + a * ldk + whole));
  }
  __m512 acc[16];
#pragma GCC unroll 16
  for (int x = 0; x < 16; ++x) acc[x] = _mm512_setzero_ps();
  for (int64_t d = 0; d < ld; d += 32) {
    const bool in_row = d < whole;  // else the padded tail block
    const uint16_t* k0 = in_row ? K + d : &tail[0][0];
    const int64_t ldk0 = in_row ? ldk : 32;
    __m512bh q[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) q[r] = (__m512bh)_mm512_loadu_si512(Q + r * ld + d);
#pragma GCC unroll 16
    for (int a = 0; a < KB; ++a) {
      // Decode streams K from memory once: rows 32 ahead, as qk_rows does.
      __builtin_prefetch(K + (a + 32) * ldk + d, 0, 2);
      const __m512bh k = (__m512bh)_mm512_loadu_si512(k0 + a * ldk0);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[a * R + r] = _mm512_dpbf16_ps(acc[a * R + r], k, q[r]);
    }
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale)));
  for (int a = 0; a < KB; ++a)
    for (int r = 0; r < R; ++r) St[a * kBR + r] = sums[a * R + r];
}

template <int R>
void qk_rows_n(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint16_t* Q, int64_t D,
               float scale) {
  constexpr int KB = 16 / R;  // keys per block: 16 accumulators
  int64_t j = 0;
  for (; j + KB <= nj; j += KB) qk_rows_block<KB, R>(St + j * kBR, K + j * ldk, ldk, Q, D, scale);
  for (; j < nj; ++j) qk_rows_block<1, R>(St + j * kBR, K + j * ldk, ldk, Q, D, scale);
}

}  // namespace

void qk_rows_bf16_avx512(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint16_t* Q,
                         int64_t D, int ncols, float scale) {
  switch (ncols) {  // ncols <= kRowsForQkRows = 4
    case 1: qk_rows_n<1>(St, K, ldk, nj, Q, D, scale); break;
    case 2: qk_rows_n<2>(St, K, ldk, nj, Q, D, scale); break;
    case 3: qk_rows_n<3>(St, K, ldk, nj, Q, D, scale); break;
    default: qk_rows_n<4>(St, K, ldk, nj, Q, D, scale); break;
  }
}

void qk_bf16_avx512(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint32_t* Qt2,
                    int64_t D, int ncols, float scale) {
  constexpr int IV = 4;
  static_assert(kBR == IV * 16, "one register block spans the tile's columns");
  const int nvec = (ncols + 15) / 16;
  if (nvec == IV) {
    qk_columns<IV>(St, K, ldk, nj, Qt2, D, scale);
    return;
  }
  for (int v = 0; v < nvec; ++v) qk_columns<1>(St + v * 16, K, ldk, nj, Qt2 + v * 16, D, scale);
}

}  // namespace qkv::kernels
