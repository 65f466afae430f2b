// gemm_bf16_avx512.cpp: gemm_bf16's packing and micro-kernel on AVX512-BF16
// (contract in core/gemm_bf16_kernels.h). Compiled with -mavx512bf16; called
// only through the table of a path that has it.
#include <immintrin.h>

#include <algorithm>

#include "core/simd/bf16_pairs_avx512.h"
#include "core/gemm_bf16_kernels.h"
#include "core/kernels/avx512bf16/gemm_bf16_store.h"
#include "qkv/tensor.h"

namespace qkv::kernels::bf16gemm {
namespace {

// R rows x kNR columns, every accumulator in a register: R x 4 + 4 B vectors
// + 1 broadcast <= 29 of the 32 zmm. No mask sits in the loop (GCC keeps
// the accumulators in memory when one does).
template <int R>
void tile_rows(const pair_word* a, int64_t a_rs, int64_t a_ks, const uint32_t* b, int64_t b_ks,
               int64_t np, int cols, float alpha, float beta, const float* bias, float* c,
               int64_t ldc, int slice) {
  __m512 acc[R][4];
  // A later slice of K goes on from the sums the one before it left in C.
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v)
      acc[r][v] = (slice & kSliceStarts) || 16 * v >= cols
                      ? _mm512_setzero_ps()
                      : _mm512_maskz_loadu_ps(first_lanes(cols - 16 * v), c + r * ldc + 16 * v);
  for (int64_t p = 0; p < np; ++p) {
    const uint32_t* bp = b + p * b_ks;
    __m512bh bv[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bp + 16 * v);
    const pair_word* ap = a + p * a_ks;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[r * a_rs]));
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], x, bv[v]);
    }
  }
  if (!(slice & kSliceEnds)) {  // the raw float32 sums, for the next slice
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v)
        if (16 * v < cols) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, first_lanes(cols - 16 * v), acc[r][v]);
    return;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __m512 bv[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v)
    bv[v] = bias && 16 * v < cols ? _mm512_maskz_loadu_ps(first_lanes(cols - 16 * v), bias + 16 * v)
                                  : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      if (16 * v >= cols) break;
      store_c(c + r * ldc + 16 * v, first_lanes(cols - 16 * v), acc[r][v], va, vb, beta != 0.0f,
              bias != nullptr, bv[v]);
    }
}

// r[i] lane j -> r[j] lane i: a 16 x 16 transpose of 32-bit words in four
// rounds of shuffles (pairs of words, then of quadwords, then two of
// 128-bit chunks).
void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // t[2i], t[2i+1]: rows 2i, 2i+1 interleaved
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + c], chunk l: column 4l + c of rows 4i .. 4i+3
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4l + c: chunk l of r[c], r[4+c], r[8+c], r[12+c]
    const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
    t[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    t[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    t[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    t[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// The 16 pair words of columns w .. w+15 (mask m) of rows s0 (low halves)
// and s1 (high halves; null: zeros): float32 rows rounded to bf16, bf16 rows
// (bit patterns) as they are. Lanes outside m are 0.
__m512i pair_words(const float* s0, const float* s1, __mmask16 m) {
  const __m512 a = _mm512_maskz_loadu_ps(m, s0);
  const __m512 b = s1 ? _mm512_maskz_loadu_ps(m, s1) : _mm512_setzero_ps();
  return simd::bf16_pair_words(a, b);
}
__m512i pair_words(const uint16_t* s0, const uint16_t* s1, __mmask16 m) {
  const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s0));
  if (!s1) return lo;
  const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s1));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

// interleave_rows for either source type (contract in gemm_bf16_kernels.h).
template <class T>
void interleave(const T* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst, int64_t dst_ld) {
  for (int64_t p = 0; p < pairs(K); ++p) {
    const T* s0 = src + 2 * p * ld;
    const T* s1 = 2 * p + 1 < K ? s0 + ld : nullptr;  // K odd: the last high half is 0
    uint32_t* d = dst + p * dst_ld;
    int64_t w = 0;
    // Lanes past W hold zeros: they pad the row up to dst_ld.
    for (; w < W; w += 16)
      _mm512_mask_storeu_epi32(d + w, first_lanes(dst_ld - w),
                               pair_words(s0 + w, s1 ? s1 + w : nullptr, first_lanes(W - w)));
    for (; w < dst_ld; w += 16)
      _mm512_mask_storeu_epi32(d + w, first_lanes(dst_ld - w), _mm512_setzero_si512());
  }
}

// transpose_pairs for either source type: each 16 columns' words of a pair
// of rows (interleave's), scattered down the 16 rows of dst they belong to.
template <class T>
void transpose(const T* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst, int64_t dst_ld) {
  alignas(64) uint32_t words[16];
  for (int64_t w = 0; w < W; w += 16) {
    const int n = static_cast<int>(std::min<int64_t>(16, W - w));
    for (int64_t p = 0; p < pairs(K); ++p) {
      const T* s0 = src + 2 * p * ld + w;
      const T* s1 = 2 * p + 1 < K ? s0 + ld : nullptr;  // K odd: the last high half is 0
      _mm512_store_si512(words, pair_words(s0, s1, first_lanes(n)));
      for (int i = 0; i < n; ++i) dst[(w + i) * dst_ld + p] = words[i];
    }
  }
}

void rows_to_pairs(const float* src, int64_t ld, int64_t R, int64_t K, uint32_t* dst,
                   int64_t dst_ld) {
  // cvtne2ps_pbh(hi, lo) holds lo's 16 bf16 then hi's: 32 consecutive
  // elements of the row, which are its 16 pairs in order.
  for (int64_t r = 0; r < R; ++r) {
    const float* s = src + r * ld;
    uint32_t* d = dst + r * dst_ld;
    for (int64_t k = 0; k < K; k += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(K - k), s + k);
      const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(K - k - 16 > 0 ? K - k - 16 : 0), s + k + 16);
      const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
      _mm512_mask_storeu_epi32(d + k / 2, first_lanes(pairs(K - k)), w);
    }
  }
}

void interleave_rows(const float* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst,
                     int64_t dst_ld) {
  interleave(src, ld, K, W, dst, dst_ld);
}

void gather_pairs(const float* src, int64_t ld, int64_t W, int64_t K, int64_t w0, int64_t w1,
                  uint32_t* dst, int64_t dst_ld) {
  // Lane i of a gather reads row w + i: byte offsets i · ld · 4 (64-bit, no
  // overflow), each fetching the pair (src[w + i][2p], src[w + i][2p + 1]).
  const __m512i rows = _mm512_mullo_epi64(_mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi64(ld));
  const int64_t full = K / 2;  // pairs whose high half exists
  // Sixteen rows at a time, all their pairs: the rows' cache lines stay in
  // L1 while p walks along them (p outermost re-read each line from L2 for
  // every pair it holds).
  for (int64_t w = w0; w < w1; w += 16) {
    const int64_t left = std::max<int64_t>(0, std::min<int64_t>(W, w1) - w);  // rows to read: 0 past W
    const __mmask8 m0 = left >= 8 ? __mmask8(0xff) : static_cast<__mmask8>((1u << left) - 1u);
    const __mmask8 m1 = left >= 16 ? __mmask8(0xff) : left <= 8 ? __mmask8(0) : static_cast<__mmask8>((1u << (left - 8)) - 1u);
    const __mmask16 store = first_lanes(dst_ld - w);
    for (int64_t p = 0; p < full; ++p) {
      const float* base = src + w * ld + 2 * p;
      // Eight pairs as eight doubles' worth of bits: floats (lo, hi) in order.
      const __m512 g0 = _mm512_castpd_ps(_mm512_mask_i64gather_pd(_mm512_setzero_pd(), m0, rows, base, 4));
      const __m512 g1 = _mm512_castpd_ps(_mm512_mask_i64gather_pd(_mm512_setzero_pd(), m1, rows, base + 8 * ld, 4));
      // cvtne2ps_pbh(g1, g0): g0's 16 bf16 then g1's, i.e. the 16 pairs of rows w .. w + 15.
      _mm512_mask_storeu_epi32(dst + p * dst_ld + w, store, (__m512i)_mm512_cvtne2ps_pbh(g1, g0));
    }
    if (full < pairs(K))  // K odd, the last pair: its high half is 0 (and past the row's end)
      for (int64_t i = 0; i < 16 && w + i < dst_ld; ++i)
        dst[full * dst_ld + w + i] = i < left ? bf16_from_float(src[(w + i) * ld + 2 * full]).bits : 0u;
  }
}

void transpose_pairs(const float* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst,
                     int64_t dst_ld) {
  transpose(src, ld, K, W, dst, dst_ld);
}

void rows_to_pairs(const uint16_t* src, int64_t ld, int64_t R, int64_t K, uint32_t* dst,
                   int64_t dst_ld) {
  for (int64_t r = 0; r < R; ++r) {
    const uint16_t* s = src + r * ld;
    uint32_t* d = dst + r * dst_ld;
    for (int64_t p = 0; p < pairs(K); ++p)
      d[p] = s[2 * p] | (2 * p + 1 < K ? static_cast<uint32_t>(s[2 * p + 1]) << 16 : 0u);
  }
}

void interleave_rows(const uint16_t* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst,
                     int64_t dst_ld) {
  interleave(src, ld, K, W, dst, dst_ld);
}

void gather_pairs(const uint16_t* src, int64_t ld, int64_t W, int64_t K, int64_t w0, int64_t w1,
                  uint32_t* dst, int64_t dst_ld) {
  // Sixteen rows by sixteen pairs at a time: each row's 16 pair words are one
  // load (they lie side by side), and a transpose in registers turns them
  // into 16 pair rows of 16 columns. Rows past W and pairs past K/2 load as 0.
  const int64_t full = K / 2;  // pairs whose high half exists
  for (int64_t w = w0; w < w1; w += 16) {
    const int64_t left = std::max<int64_t>(0, std::min<int64_t>(W, w1) - w);  // rows to read: 0 past W
    const __mmask16 store = first_lanes(dst_ld - w);
    for (int64_t p = 0; p < full; p += 16) {
      const int n = static_cast<int>(std::min<int64_t>(16, full - p));
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < left ? _mm512_maskz_loadu_epi32(first_lanes(n), src + (w + i) * ld + 2 * p)
                        : _mm512_setzero_si512();
      transpose16(r);
      for (int j = 0; j < n; ++j) _mm512_mask_storeu_epi32(dst + (p + j) * dst_ld + w, store, r[j]);
    }
    if (full < pairs(K))  // K odd, the last pair: its high half is 0 (and past the row's end)
      for (int64_t i = 0; i < 16 && w + i < dst_ld; ++i)
        dst[full * dst_ld + w + i] = i < left ? src[(w + i) * ld + 2 * full] : 0u;
  }
}

void transpose_pairs(const uint16_t* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst,
                     int64_t dst_ld) {
  transpose(src, ld, K, W, dst, dst_ld);
}

void tile(const pair_word* a, int64_t a_rs, int64_t a_ks, int rows, const uint32_t* b,
          int64_t b_ks, int64_t np, int cols, float alpha, float beta, const float* bias, float* c,
          int64_t ldc, int slice) {
  switch (rows) {
    case 1: return tile_rows<1>(a, a_rs, a_ks, b, b_ks, np, cols, alpha, beta, bias, c, ldc, slice);
    case 2: return tile_rows<2>(a, a_rs, a_ks, b, b_ks, np, cols, alpha, beta, bias, c, ldc, slice);
    case 3: return tile_rows<3>(a, a_rs, a_ks, b, b_ks, np, cols, alpha, beta, bias, c, ldc, slice);
    case 4: return tile_rows<4>(a, a_rs, a_ks, b, b_ks, np, cols, alpha, beta, bias, c, ldc, slice);
    case 5: return tile_rows<5>(a, a_rs, a_ks, b, b_ks, np, cols, alpha, beta, bias, c, ldc, slice);
    default: return tile_rows<kMR>(a, a_rs, a_ks, b, b_ks, np, cols, alpha, beta, bias, c, ldc, slice);
  }
}

}  // namespace

constinit const PairGemmKernels pair_gemm_avx512bf16{
    {rows_to_pairs, interleave_rows, gather_pairs, transpose_pairs},
    {rows_to_pairs, interleave_rows, gather_pairs, transpose_pairs},
    tile};

}  // namespace qkv::kernels::bf16gemm
