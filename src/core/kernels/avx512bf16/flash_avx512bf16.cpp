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

// KB keys x R rows of the decode form, vectors of 32 bf16 along D.
template <int KB, int R>
inline void qk_rows_block(float* St, const uint16_t* K, int64_t ldk, const uint16_t* Q, int64_t D,
                          float scale) {
  const int64_t ld = bf16_row_pad(D);
  __m512 acc[KB][R];
  for (int a = 0; a < KB; ++a)
    for (int r = 0; r < R; ++r) acc[a][r] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 32) {
    const __mmask32 m = D - d >= 32 ? ~__mmask32{0} : (__mmask32{1} << (D - d)) - 1;
    __m512bh q[R];
    for (int r = 0; r < R; ++r) q[r] = (__m512bh)_mm512_loadu_si512(Q + r * ld + d);
    for (int a = 0; a < KB; ++a) {
      // Decode streams K from memory once: rows 32 ahead, as qk_rows does.
      __builtin_prefetch(K + (a + 32) * ldk + d, 0, 2);
      const __m512bh k = (__m512bh)_mm512_maskz_loadu_epi16(m, K + a * ldk + d);
      for (int r = 0; r < R; ++r) acc[a][r] = _mm512_dpbf16_ps(acc[a][r], k, q[r]);
    }
  }
  for (int a = 0; a < KB; ++a)
    for (int r = 0; r < R; ++r) St[a * kBR + r] = _mm512_reduce_add_ps(acc[a][r]) * scale;
}

template <int R>
void qk_rows_n(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint16_t* Q, int64_t D,
               float scale) {
  int64_t j = 0;
  for (; j + 4 <= nj; j += 4) qk_rows_block<4, R>(St + j * kBR, K + j * ldk, ldk, Q, D, scale);
  for (; j < nj; ++j) qk_rows_block<1, R>(St + j * kBR, K + j * ldk, ldk, Q, D, scale);
}

// 16 bf16 of a V row widened to float32 (the first n; the rest 0).
inline __m512 widen16(const uint16_t* p, int n) {
  const __mmask16 m = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
  const __m512i x = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

// Rows [0, R) x value columns [e, e + 64) (fewer at the end of Dv).
template <int R>
void pv_rows_n(float* O, const float* P, int64_t nj, const uint16_t* V, int64_t ldv, int64_t Dv,
               const float* alpha) {
  constexpr int EV = 4;
  for (int64_t e = 0; e < Dv; e += EV * 16) {
    int n[EV];
    for (int b = 0; b < EV; ++b) {
      const int64_t left = Dv - e - b * 16;
      n[b] = left >= 16 ? 16 : left > 0 ? static_cast<int>(left) : 0;
    }
    auto mask = [&](int b) {
      return n[b] >= 16 ? __mmask16(0xffff) : __mmask16((1u << n[b]) - 1u);
    };
    __m512 acc[R][EV];
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(alpha[r]);
      for (int b = 0; b < EV; ++b)
        acc[r][b] = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mask(b), O + r * Dv + e + b * 16));
    }
    for (int64_t j = 0; j < nj; ++j) {
      if (e == 0)  // V is streamed once: its rows 32 ahead, whole
        for (int64_t x = 0; x < Dv; x += 32) __builtin_prefetch(V + (j + 32) * ldv + x, 0, 2);
      __m512 v[EV];
      for (int b = 0; b < EV; ++b) v[b] = widen16(V + j * ldv + e + b * 16, n[b]);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_set1_ps(P[j * kBR + r]);
        for (int b = 0; b < EV; ++b) acc[r][b] = _mm512_fmadd_ps(p, v[b], acc[r][b]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < EV; ++b)
        _mm512_mask_storeu_ps(O + r * Dv + e + b * 16, mask(b), acc[r][b]);
  }
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

void pv_rows_bf16_avx512(float* O, const float* P, int64_t nj, int ncols, const uint16_t* V,
                         int64_t ldv, int64_t Dv, const float* alpha) {
  switch (ncols) {  // ncols <= kRowsForQkRows = 4
    case 1: pv_rows_n<1>(O, P, nj, V, ldv, Dv, alpha); break;
    case 2: pv_rows_n<2>(O, P, nj, V, ldv, Dv, alpha); break;
    case 3: pv_rows_n<3>(O, P, nj, V, ldv, Dv, alpha); break;
    default: pv_rows_n<4>(O, P, nj, V, ldv, Dv, alpha); break;
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
