// pv_avx512bf16.cpp: P·V for bfloat16 inputs, and the backward's three
// products of the same shape (contracts in flash_bf16.h). Compiled with the
// AVX512-BF16 flags of flash_avx512bf16.cpp (CMakeLists.txt); only ever
// called after qkv::active_isa() said the CPU has AVX512-BF16.
//
// Three forms:
//  - prefill (pv_bf16_avx512): vdpbf16ps on pairs of keys. The weights are
//    rounded to bf16 (as PyTorch's and FlashAttention's bf16 kernels do) and
//    packed as P2[t][i] = (P[2t][i], P[2t+1][i]); V's rows are interleaved in
//    pairs once per tile, V2[t][e] = (V[2t][e], V[2t+1][e]). Each vdpbf16ps
//    then adds two keys' products per lane: twice the float32 FMA's work.
//  - decode (pv_rows_bf16_avx512): the same rounded pairs of weights, and V
//    streamed once from memory, two rows interleaved in registers
//    (unpacklo/hi_epi16) rather than packed: each V byte is read once.
//  - the backward (mac_pairs_bf16_avx512): prefill's kernel, accumulating
//    without rescaling, its weight words in either layout (PairLayout): dQ
//    takes dS in pairs of keys as P·V takes P; dV and dK take each key row's
//    P or dS in pairs of queries, rounded row by row (round_rows_bf16_avx512).
#include <immintrin.h>

#include <cstdint>

#include "core/kernels/flash_bf16.h"
#include "core/simd/bf16_pairs_avx512.h"

namespace qkv::kernels {
namespace {

inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// ---- decode: V rows read in place, two keys at a time ----
//
// unpacklo/hi_epi16 of rows a = V[2t] and b = V[2t+1] interleave them into
// pairs within each 128-bit lane: lo holds the pairs of columns 8L + 0..3 of
// lane L, hi those of 8L + 4..7. The accumulators keep that order; O is
// brought into it when loaded and back when stored, once per block.
alignas(64) constexpr int kToNatural0[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
alignas(64) constexpr int kToNatural1[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
alignas(64) constexpr int kToLo[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
alignas(64) constexpr int kToHi[16] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};

inline __mmask32 first_lanes32(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : n <= 0 ? __mmask32{0} : (__mmask32{1} << n) - 1;
}

// Rows [0, R) x value columns [e, e + 64): per row, accumulators (lo, hi)
// of the two 32-column halves. PARTIAL: columns past Dv masked off. The
// loops over rows and halves unroll by pragma (see pv2_block).
template <int R, bool PARTIAL>
void pv_pairs_block(float* O, const uint32_t* P2, int64_t nj, const uint16_t* V, int64_t ldv,
                    int64_t Dv, int64_t e, const float* alpha, bool prefetch) {
  const __m512i to_n0 = _mm512_load_si512(kToNatural0), to_n1 = _mm512_load_si512(kToNatural1);
  const __m512i to_lo = _mm512_load_si512(kToLo), to_hi = _mm512_load_si512(kToHi);
  __m512 acc[R][4];  // [row][2 * half + (0 lo, 1 hi)]
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 s = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const float* o = O + r * Dv + e + 32 * h;
      const int64_t left = Dv - e - 32 * h;
      const __m512 n0 = _mm512_mul_ps(s, PARTIAL ? _mm512_maskz_loadu_ps(first_lanes(left), o) : _mm512_loadu_ps(o));
      const __m512 n1 = _mm512_mul_ps(s, PARTIAL ? _mm512_maskz_loadu_ps(first_lanes(left - 16), o + 16)
                                                 : _mm512_loadu_ps(o + 16));
      acc[r][2 * h] = _mm512_permutex2var_ps(n0, to_lo, n1);
      acc[r][2 * h + 1] = _mm512_permutex2var_ps(n0, to_hi, n1);
    }
  }
  const __mmask32 m0 = first_lanes32(Dv - e), m1 = first_lanes32(Dv - e - 32);
  for (int64_t t = 0; t < bf16_pairs(nj); ++t) {
    const uint16_t* a = V + 2 * t * ldv + e;
    const bool odd_end = 2 * t + 1 == nj;  // the last pair's second key is absent (P2 has 0 there)
    const uint16_t* b = odd_end ? a : a + ldv;
    if (prefetch)  // V is streamed once: both rows 32 keys ahead, whole
      for (int64_t x = 0; x < Dv; x += 32) {
        __builtin_prefetch(a + 32 * ldv - e + x, 0, 2);
        __builtin_prefetch(b + 32 * ldv - e + x, 0, 2);
      }
    __m512bh lo[2], hi[2];
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m512i va = PARTIAL ? _mm512_maskz_loadu_epi16(h ? m1 : m0, a + 32 * h) : _mm512_loadu_si512(a + 32 * h);
      const __m512i vb = PARTIAL ? _mm512_maskz_loadu_epi16(h ? m1 : m0, b + 32 * h) : _mm512_loadu_si512(b + 32 * h);
      lo[h] = (__m512bh)_mm512_unpacklo_epi16(va, vb);
      hi[h] = (__m512bh)_mm512_unpackhi_epi16(va, vb);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh pw = (__m512bh)_mm512_set1_epi32(static_cast<int>(P2[t * kBR + r]));
#pragma GCC unroll 8
      for (int h = 0; h < 2; ++h) {
        acc[r][2 * h] = _mm512_dpbf16_ps(acc[r][2 * h], pw, lo[h]);
        acc[r][2 * h + 1] = _mm512_dpbf16_ps(acc[r][2 * h + 1], pw, hi[h]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      float* o = O + r * Dv + e + 32 * h;
      const int64_t left = Dv - e - 32 * h;
      const __m512 n0 = _mm512_permutex2var_ps(acc[r][2 * h], to_n0, acc[r][2 * h + 1]);
      const __m512 n1 = _mm512_permutex2var_ps(acc[r][2 * h], to_n1, acc[r][2 * h + 1]);
      if (PARTIAL) {
        _mm512_mask_storeu_ps(o, first_lanes(left), n0);
        _mm512_mask_storeu_ps(o + 16, first_lanes(left - 16), n1);
      } else {
        _mm512_storeu_ps(o, n0);
        _mm512_storeu_ps(o + 16, n1);
      }
    }
}

template <int R>
void pv_pairs_rows(float* O, const uint32_t* P2, int64_t nj, const uint16_t* V, int64_t ldv,
                   int64_t Dv, const float* alpha) {
  int64_t e = 0;
  for (; e + 64 <= Dv; e += 64) pv_pairs_block<R, false>(O, P2, nj, V, ldv, Dv, e, alpha, e == 0);
  if (e < Dv) pv_pairs_block<R, true>(O, P2, nj, V, ldv, Dv, e, alpha, e == 0);
}

// The pair words pv2 broadcasts: word (t, a) of row a's pair t at
// w[t * PT + a * PA], a compile-time layout (runtime strides cost the forward's
// P·V 3.5%). P·V's weights are [pairs][kBR] (PT = kBR, PA = 1); the
// backward's rows of bf16 are [rows][kBR / 2] words (PT = 1, PA = kBR / 2).
template <int PT, int PA>
struct Pairs {
  const uint32_t* w;
  uint32_t at(int64_t t, int64_t a) const { return w[t * PT + a * PA]; }
  Pairs from_row(int64_t a) const { return Pairs{w + a * PA}; }
};
using PairMajor = Pairs<kBR, 1>;
using RowMajor = Pairs<1, kBR / 2>;

// O rows [0, IB) x value columns [e, e + EV*16) of the prefill form: for each
// pair of keys, EV vectors of V2 loaded once and one P2 word broadcast per
// row. PARTIAL: columns past Dv masked off (the last block of a row).
// Every loop over a or b unrolls by pragma: left to GCC's late unroller,
// the accumulators lived on the stack outside the t loop (stored and
// reloaded around it, ~100 stack moves per call at 6 x 4).
template <int IB, int EV, bool PARTIAL, class P>
void pv2_block(float* O, int64_t Dv, const P& P2, int64_t npairs, const uint32_t* V2,
               int64_t e, const float* alpha) {
  __m512 acc[IB][EV];
#pragma GCC unroll 8
  for (int a = 0; a < IB; ++a) {
#pragma GCC unroll 4
    for (int b = 0; b < EV; ++b) {
      const __m512 o = PARTIAL ? _mm512_maskz_loadu_ps(first_lanes(Dv - e - b * 16), O + a * Dv + e + b * 16)
                               : _mm512_loadu_ps(O + a * Dv + e + b * 16);
      acc[a][b] = alpha ? _mm512_mul_ps(_mm512_set1_ps(alpha[a]), o) : o;
    }
  }
  for (int64_t t = 0; t < npairs; ++t) {
    __m512bh v[EV];
#pragma GCC unroll 4
    for (int b = 0; b < EV; ++b)
      v[b] = (__m512bh)(PARTIAL ? _mm512_maskz_loadu_epi32(first_lanes(Dv - e - b * 16), V2 + t * Dv + e + b * 16)
                                : _mm512_loadu_si512(V2 + t * Dv + e + b * 16));
#pragma GCC unroll 8
    for (int a = 0; a < IB; ++a) {
      const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(P2.at(t, a)));
#pragma GCC unroll 4
      for (int b = 0; b < EV; ++b) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], p, v[b]);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < IB; ++a)
#pragma GCC unroll 4
    for (int b = 0; b < EV; ++b) {
      if (PARTIAL)
        _mm512_mask_storeu_ps(O + a * Dv + e + b * 16, first_lanes(Dv - e - b * 16), acc[a][b]);
      else
        _mm512_storeu_ps(O + a * Dv + e + b * 16, acc[a][b]);
    }
}

// The last EV vectors of columns from e: masked only when Dv is not a
// whole number of vectors (Dv = 32, the GPT's heads, runs unmasked: masked,
// this block took twice Q·Kᵀ's time).
template <int IB, int EV, class P>
void pv2_tail(float* O, int64_t Dv, const P& P2, int64_t npairs, const uint32_t* V2,
              int64_t e, const float* alpha) {
  if (Dv % 16 == 0)
    pv2_block<IB, EV, false>(O, Dv, P2, npairs, V2, e, alpha);
  else
    pv2_block<IB, EV, true>(O, Dv, P2, npairs, V2, e, alpha);
}

// Rows [0, IB) across all Dv columns, four vectors (64 columns) at a time.
template <int IB, class P>
void pv2_rows(float* O, int64_t Dv, const P& P2, int64_t npairs, const uint32_t* V2,
              const float* alpha) {
  int64_t e = 0;
  for (; e + 64 <= Dv; e += 64) pv2_block<IB, 4, false>(O, Dv, P2, npairs, V2, e, alpha);
  switch ((Dv - e + 15) / 16) {  // the last 1-63 columns
    case 0: break;
    case 1: pv2_tail<IB, 1>(O, Dv, P2, npairs, V2, e, alpha); break;
    case 2: pv2_tail<IB, 2>(O, Dv, P2, npairs, V2, e, alpha); break;
    case 3: pv2_tail<IB, 3>(O, Dv, P2, npairs, V2, e, alpha); break;
    default: pv2_tail<IB, 4>(O, Dv, P2, npairs, V2, e, alpha); break;
  }
}

// O rows [0, nrows) x all Dv columns += the pairs' products (O scaled by
// alpha first, when given).
template <class P>
void pv2_all(float* O, const P& P2, int64_t npairs, int nrows, const uint32_t* V2, int64_t Dv,
             const float* alpha) {
  constexpr int IB = 6;  // 6 x 4 accumulators + 4 V vectors + 1 broadcast of 32 registers
  auto al = [&](int i) { return alpha ? alpha + i : nullptr; };
  int i = 0;
  for (; i + IB <= nrows; i += IB) pv2_rows<IB>(O + i * Dv, Dv, P2.from_row(i), npairs, V2, al(i));
  float* o = O + i * Dv;
  const P p = P2.from_row(i);
  switch (nrows - i) {  // the row tail in one pass, so V2 is still read once per block
    case 0: break;
    case 1: pv2_rows<1>(o, Dv, p, npairs, V2, al(i)); break;
    case 2: pv2_rows<2>(o, Dv, p, npairs, V2, al(i)); break;
    case 3: pv2_rows<3>(o, Dv, p, npairs, V2, al(i)); break;
    case 4: pv2_rows<4>(o, Dv, p, npairs, V2, al(i)); break;
    default: pv2_rows<5>(o, Dv, p, npairs, V2, al(i)); break;
  }
}

}  // namespace

void pack_p_bf16_avx512(uint32_t* P2, const float* P, int64_t nj, int ncols) {
  const int nvec = (ncols + 15) / 16;
  for (int64_t t = 0; t < bf16_pairs(nj); ++t)
    for (int v = 0; v < nvec; ++v) {
      const __m512 a = _mm512_loadu_ps(P + 2 * t * kBR + v * 16);
      const __m512 b = 2 * t + 1 < nj ? _mm512_loadu_ps(P + (2 * t + 1) * kBR + v * 16)
                                      : _mm512_setzero_ps();
      _mm512_storeu_si512(P2 + t * kBR + v * 16, simd::bf16_pair_words(a, b));
    }
}

void pack_v_bf16_avx512(uint32_t* V2, const uint16_t* V, int64_t ldv, int64_t nj, int64_t Dv) {
  for (int64_t t = 0; t < bf16_pairs(nj); ++t) {
    const uint16_t* a = V + 2 * t * ldv;
    const uint16_t* b = 2 * t + 1 < nj ? a + ldv : nullptr;  // odd nj: the last pair's high half 0
    for (int64_t e = 0; e < Dv; e += 16) {
      const __mmask16 m = first_lanes(Dv - e);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, a + e));
      const __m512i hi = b ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b + e))
                           : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(V2 + t * Dv + e, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

void pv_bf16_avx512(float* O, const uint32_t* P2, int64_t nj, int ncols, const uint32_t* V2,
                    int64_t Dv, const float* alpha) {
  pv2_all(O, PairMajor{P2}, bf16_pairs(nj), ncols, V2, Dv, alpha);
}

void mac_pairs_bf16_avx512(float* C, const uint32_t* A2, PairLayout layout, int64_t npairs, int nr,
                           const uint32_t* B2, int64_t ne) {
  if (layout == PairLayout::pair_major)
    pv2_all(C, PairMajor{A2}, npairs, nr, B2, ne, nullptr);
  else
    pv2_all(C, RowMajor{A2}, npairs, nr, B2, ne, nullptr);
}

void round_rows_bf16_avx512(uint16_t* dst, const float* src, int64_t rows, int ncols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < ncols; c += 16) {
      const __m512 x = _mm512_maskz_loadu_ps(first_lanes(ncols - c), src + r * kBR + c);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + r * kBR + c),
                          (__m256i)_mm512_cvtneps_pbh(x));
    }
}

void pv_rows_bf16_avx512(float* O, const uint32_t* P2, int64_t nj, int ncols, const uint16_t* V,
                         int64_t ldv, int64_t Dv, const float* alpha) {
  switch (ncols) {  // ncols <= kRowsForQkRows = 4
    case 1: pv_pairs_rows<1>(O, P2, nj, V, ldv, Dv, alpha); break;
    case 2: pv_pairs_rows<2>(O, P2, nj, V, ldv, Dv, alpha); break;
    case 3: pv_pairs_rows<3>(O, P2, nj, V, ldv, Dv, alpha); break;
    default: pv_pairs_rows<4>(O, P2, nj, V, ldv, Dv, alpha); break;
  }
}

}  // namespace qkv::kernels
