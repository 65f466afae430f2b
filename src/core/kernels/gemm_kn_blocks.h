// gemm_kn_blocks.h: the register blocks of the GEMM for few rows against a
// weight stored [K, N], one input per row (GPT-2's Conv1D weights, read
// where a mapped checkpoint holds them; contract in core/gemm_dot_kernels.h),
// one copy for its float32 and bf16 kernels (avx512/gemm_dot_avx512.cpp,
// avx512bf16/gemm_dot_bf16.cpp). Inline AVX-512 code: include it only from
// files compiled with the AVX-512 flags.
//
// Each lane of a vector is one column of C, so an element's K sum runs down
// its lane in order of k (bf16: a pair of k at a time, one vdpbf16ps), and
// its bits depend on K and its operands alone: never on N, M, the block
// or the thread.
//
// C is covered by blocks of up to kRows rows of A x Ops::kUnits units of
// Ops::kCols columns (16 accumulators). Each step loads the block's slice
// of one row of B (two for bf16) and multiplies it into every row's
// accumulators. A decoded token (one row) takes Ops::kWideUnits units: 8
// independent sums a step keep the multiply-adds' latency below the time
// the step's bytes take to arrive.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace qkv::kernels::kn {

constexpr int kRows = 4;

// B's rows this far ahead are fetched while a block works: a block's slice
// of a row is a few cache lines, one row length apart, which the hardware
// prefetchers follow poorly on their own.
constexpr int64_t kAhead = 16;

// The first n of `lanes` lanes (none for n <= 0, all from n = lanes).
template <class Mask, int64_t lanes>
Mask first_lanes(int64_t n) {
  return n >= lanes ? static_cast<Mask>(~Mask(0)) : n > 0 ? static_cast<Mask>((1ull << n) - 1u) : Mask(0);
}

// C's element c = alpha · sum + beta · c (beta = 0: c is not read), then +
// bias, for the n <= 16 columns of one vector.
inline void store(__m512 sum, float alpha, float beta, const float* bias, float* c, int64_t n) {
  const __mmask16 m = n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
  __m512 y = _mm512_mul_ps(_mm512_set1_ps(alpha), sum);
  if (beta != 0.0f) y = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m, c), y);
  if (bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, bias));
  _mm512_mask_storeu_ps(c, m, y);
}

// Ops: the element type E; kCols columns and kK rows of k a step covers, in
// kVecs accumulators a row, Mask the lanes of a step's row of B; load<rows>() a step's vectors of B (rows of k: kK,
// or fewer at the end), pair<rows>() the matching values of a row of A,
// mac() acc += their products, and columns() the accumulators in column
// order, 16 columns a vector. n is the block's columns, at most U · kCols.
// Full: n = U · kCols, every load whole (the masks constant).
template <class Ops, int R, int U, bool Full>
void block(int64_t K, float alpha, const typename Ops::E* A, int64_t lda, const typename Ops::E* B,
           int64_t ldb, int64_t n, float beta, const float* bias, float* C, int64_t ldc) {
  constexpr int V = Ops::kVecs;
  typename Ops::Mask mask[U];
#pragma GCC unroll 8
  for (int u = 0; u < U; ++u)
    mask[u] = first_lanes<typename Ops::Mask, Ops::kCols>(Full ? Ops::kCols : n - u * Ops::kCols);
  __m512 acc[R][U][V];
#pragma GCC unroll 32
  for (int x = 0; x < R * U * V; ++x) acc[x / (U * V)][x / V % U][x % V] = _mm512_setzero_ps();
  auto step = [&]<int64_t rows>(int64_t k) {
    typename Ops::B a[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) a[i] = Ops::template pair<rows>(A + i * lda + k);
    const typename Ops::E* b = B + k * ldb;
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const typename Ops::Step bu = Ops::template load<rows>(b + u * Ops::kCols, ldb, mask[u]);
      if (k + kAhead + Ops::kK <= K)
#pragma GCC unroll 2
        for (int64_t r = 0; r < Ops::kK; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(b + (kAhead + r) * ldb + u * Ops::kCols), _MM_HINT_T0);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[i][u][v] = Ops::mac(acc[i][u][v], a[i], bu.v[v]);
    }
  };
  int64_t k = 0;
  for (; k + Ops::kK <= K; k += Ops::kK) step.template operator()<Ops::kK>(k);
  if (k < K) step.template operator()<1>(k);
  // Unrolled, so that the accumulators stay registers throughout.
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      __m512 out[V];
      Ops::columns(acc[i][u], out);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        const int64_t j = u * Ops::kCols + v * 16;
        if (j < n)
          store(out[v], alpha, beta, bias ? bias + j : nullptr, C + i * ldc + j, std::min<int64_t>(16, n - j));
      }
    }
}

// The block of `rows` rows (1 .. kRows).
template <class Ops, int U, bool Full>
void blocks(int rows, int64_t K, float alpha, const typename Ops::E* A, int64_t lda,
            const typename Ops::E* B, int64_t ldb, int64_t n, float beta, const float* bias, float* C,
            int64_t ldc) {
  switch (rows) {
    case 1: return block<Ops, 1, U, Full>(K, alpha, A, lda, B, ldb, n, beta, bias, C, ldc);
    case 2: return block<Ops, 2, U, Full>(K, alpha, A, lda, B, ldb, n, beta, bias, C, ldc);
    case 3: return block<Ops, 3, U, Full>(K, alpha, A, lda, B, ldb, n, beta, bias, C, ldc);
    default: return block<Ops, 4, U, Full>(K, alpha, A, lda, B, ldb, n, beta, bias, C, ldc);
  }
}

// All of C [M, N]: column slices of U units, each met by every row block
// of A in turn (the slice of B, under 1 MiB at K = 3072, then read from L2).
template <class Ops, int U>
void slices(int64_t M, int64_t N, int64_t K, float alpha, const typename Ops::E* A, int64_t lda,
            const typename Ops::E* B, int64_t ldb, float beta, const float* bias, float* C, int64_t ldc) {
  constexpr int64_t kSlice = U * Ops::kCols;
  for (int64_t j = 0; j < N; j += kSlice) {
    const int64_t n = std::min(kSlice, N - j);
    const float* bj = bias ? bias + j : nullptr;
    for (int64_t i = 0; i < M; i += kRows) {
      const auto* a = A + i * lda;
      float* c = C + i * ldc + j;
      const int rows = static_cast<int>(std::min<int64_t>(kRows, M - i));
      if (n == kSlice) blocks<Ops, U, true>(rows, K, alpha, a, lda, B + j, ldb, n, beta, bj, c, ldc);
      else blocks<Ops, U, false>(rows, K, alpha, a, lda, B + j, ldb, n, beta, bj, c, ldc);
    }
  }
}

template <class Ops>
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const typename Ops::E* A, int64_t lda,
          const typename Ops::E* B, int64_t ldb, float beta, const float* bias, float* C, int64_t ldc) {
  // One row (a decoded token) in wider slices. Sweeping whole rows of B
  // instead, the sums in L1 between passes, read no faster (0.89-0.92x the
  // bandwidth of B [N, K] against 0.88-0.93x, alternated, Zen 5).
  if (M == 1) slices<Ops, Ops::kWideUnits>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
  else slices<Ops, Ops::kUnits>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

}  // namespace qkv::kernels::kn
