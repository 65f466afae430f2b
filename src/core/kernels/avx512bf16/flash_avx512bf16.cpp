// flash_avx512bf16.cpp: Q·Kᵀ for bfloat16 inputs with vdpbf16ps (contract in
// flash_bf16.h). Compiled with -mavx512f ... -mavx512bf16 (CMakeLists.txt);
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
  __m512 acc[JB][IV];
  for (int a = 0; a < JB; ++a)
    for (int b = 0; b < IV; ++b) acc[a][b] = _mm512_setzero_ps();
  for (int64_t t = 0; t < pairs; ++t) {
    __m512bh q[IV];
    for (int b = 0; b < IV; ++b)
      q[b] = (__m512bh)_mm512_loadu_si512(Qt2 + t * kBR + b * 16);
    for (int a = 0; a < JB; ++a) {
      int w;
      if (t < whole)
        std::memcpy(&w, K + a * ldk + 2 * t, sizeof w);
      else
        w = pair_at(K + a * ldk, t, D);
      const __m512bh k = (__m512bh)_mm512_set1_epi32(w);
      for (int b = 0; b < IV; ++b) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], k, q[b]);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
  for (int a = 0; a < JB; ++a)
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

}  // namespace

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
