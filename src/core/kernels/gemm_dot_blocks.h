// gemm_dot_blocks.h: the register blocks of the dot-product GEMM (contract
// in core/gemm_dot_kernels.h), one copy for its float32 and bf16 kernels
// (avx512/gemm_dot_avx512.cpp, avx512bf16/gemm_dot_bf16.cpp), which differ
// only in the element type and the multiply-add. Inline AVX-512 code:
// include it only from files compiled with the AVX-512 flags.
//
// C is covered by blocks of up to kR rows of A x kJ rows of B: kR · kJ = 24
// accumulators, and per vector step of k kR + kJ = 10 loads for 24
// multiply-adds. B's kJ rows (9 KiB of float32 at K = 384) stay in L1 while
// every row block of A passes over them, so B is read from memory once.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/gemm_dot_kernels.h"

namespace qkv::kernels::dot {

constexpr int kR = 4, kJ = static_cast<int>(kDotBlockColumns);

// The sums of the lanes of v[0..3] into s[0..3], by one tree for each:
// 256-bit halves added, then 128-bit quarters, then within the quarter
// (pairs two apart, then neighbours). 13 instructions for the four, where
// _mm512_reduce_add_ps takes 8 for one.
inline void reduce4(const __m512 v[4], float s[4]) {
  const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44),
                                   _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
  const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44),
                                   _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
  // Quarter q of u holds v[q]'s four partial sums.
  __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88),
                           _mm512_shuffle_f32x4(t01, t23, 0xDD));
  u = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
  u = _mm512_add_ps(u, _mm512_permute_ps(u, 0xB1));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, u);
  for (int q = 0; q < 4; ++q) s[q] = lanes[4 * q];
}

// C's element c = alpha · sum + beta · c (beta = 0: c is not read), then + bias.
inline void store(float sum, float alpha, float beta, const float* bias, float& c) {
  float y = alpha * sum;
  if (beta != 0.0f) y = std::fma(beta, c, y);
  c = bias ? y + *bias : y;
}

// Ops: the element type E, the k one vector holds (kWidth), a vector of
// them (full, or the first n with 0 after), and acc += the products.
// `next` (or null): rows of B a later block reads, those of bit j set in
// `rows` fetched into L2 meanwhile.
template <class Ops, int R, int J>
void block(int64_t K, float alpha, const typename Ops::E* A, int64_t lda,
           const typename Ops::E* B, int64_t ldb, const typename Ops::E* next, unsigned rows,
           float beta, const float* bias, float* C, int64_t ldc) {
  __m512 acc[R][J];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < J; ++j) acc[i][j] = _mm512_setzero_ps();
  auto step = [&](int64_t k, int64_t n) {  // n < kWidth: the last, partial vector
    typename Ops::V b[J];
    for (int j = 0; j < J; ++j) b[j] = Ops::load(B + j * ldb + k, n);
    if (next)
      for (int j = 0; j < kJ; ++j)
        if (rows >> j & 1u) _mm_prefetch(reinterpret_cast<const char*>(next + j * ldb + k), _MM_HINT_T1);
    for (int i = 0; i < R; ++i) {
      const typename Ops::V a = Ops::load(A + i * lda + k, n);
      for (int j = 0; j < J; ++j) acc[i][j] = Ops::mac(acc[i][j], a, b[j]);
    }
  };
  int64_t k = 0;
  for (; k + Ops::kWidth <= K; k += Ops::kWidth) step(k, Ops::kWidth);
  if (k < K) step(k, K - k);
  // The R · J sums four at a time (zeros past the last).
  constexpr int kGroups = (R * J + 3) / 4;
  float sums[4 * kGroups];
#pragma GCC unroll 8
  for (int g = 0; g < kGroups; ++g) {
    __m512 four[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const int x = 4 * g + q;
      four[q] = x < R * J ? acc[x / J][x % J] : _mm512_setzero_ps();
    }
    reduce4(four, sums + 4 * g);
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < J; ++j) store(sums[i * J + j], alpha, beta, bias ? bias + j : nullptr, C[i * ldc + j]);
}

// One row of A against one row of B (a decoded token's product with a
// weight row): the vectors of k summed in four chains (vector v in chain v
// mod 4), added pairwise at the end. One chain waits out a multiply-add's
// latency at every vector and reads float32 weights below the memory
// bandwidth; four read TinyLlama-shaped float32 weights in 2 MiB pages 5-6%
// faster than two (76-84 GB/s, Zen 5).
//
// A row that does not start on a 64-byte line (a checkpoint's tensors lie
// at any multiple of their element) is read as the aligned lines that hold
// it, vector v put together from lines v and v + 1 by one two-source
// permute, each line loaded once, the lines at either end masked to the
// row's bytes, and the line kRowAhead bytes on fetched (the permutes fill
// the out-of-order window sooner, and fewer lines are then in flight).
// Each vector holds what an unaligned load would, so the bits do not depend
// on where the row lies. Measured on one thread over 1 GiB of float32 rows
// 24 bytes past a line (Zen 5, alternated): unaligned loads 25-27 GB/s,
// the lines permuted 25-27, permuted and fetched 2 KiB ahead 32-34, the
// same rows aligned 35-38.
constexpr int64_t kRowAhead = 2048;

template <class Ops>
void row(int64_t K, float alpha, const typename Ops::E* A, const typename Ops::E* B, float beta,
         const float* bias, float& c) {
  using E = typename Ops::E;
  constexpr int kC = 4;
  constexpr int64_t W = Ops::kWidth, kSize = sizeof(E);
  __m512 acc[kC];
  for (int q = 0; q < kC; ++q) acc[q] = _mm512_setzero_ps();
  const int64_t full = K / W;  // whole vectors
  int64_t v = 0;               // the next vector
  const uintptr_t at = reinterpret_cast<uintptr_t>(B);
  // Elements past the line; a row not at a multiple of its element (never
  // from a checkpoint reader, which refuses such tensors) is read as it lies.
  const int64_t shift = at % kSize ? 0 : static_cast<int64_t>(at % 64 / kSize);
  if (shift == 0) {
    for (; v + kC <= full; v += kC)
#pragma GCC unroll 8
      for (int q = 0; q < kC; ++q)
        acc[q] = Ops::mac(acc[q], Ops::load(A + (v + q) * W, W), Ops::load(B + (v + q) * W, W));
    for (; v < full; ++v) acc[v % kC] = Ops::mac(acc[v % kC], Ops::load(A + v * W, W), Ops::load(B + v * W, W));
  } else {
    const char* base = reinterpret_cast<const char*>(at - at % 64);
    const int64_t first = shift * kSize, end = first + K * kSize;  // the row's bytes from base
    // Line l masked to the row's bytes (the first and the last).
    auto edge = [&](int64_t l) {
      const int64_t from = std::max<int64_t>(first - 64 * l, 0), to = std::min<int64_t>(end - 64 * l, 64);
      const __mmask64 m = (to >= 64 ? ~0ull : (1ull << to) - 1u) & ~((1ull << from) - 1u);
      return _mm512_maskz_loadu_epi8(m, base + 64 * l);
    };
    // Lane l of vector v takes element shift + l of lines v and v + 1 side by side.
    alignas(64) int32_t at32[16];
    alignas(64) int16_t at16[32];
    for (int l = 0; l < 16; ++l) at32[l] = static_cast<int32_t>(shift + l);
    for (int l = 0; l < 32; ++l) at16[l] = static_cast<int16_t>(shift + l);
    const __m512i idx = kSize == 4 ? _mm512_load_si512(at32) : _mm512_load_si512(at16);
    auto join = [&](__m512i lo, __m512i hi) {
      if constexpr (kSize == 4) return Ops::from_bits(_mm512_permutex2var_epi32(lo, idx, hi));
      else return Ops::from_bits(_mm512_permutex2var_epi16(lo, idx, hi));
    };
    __m512i lo = edge(0);
    // Vector v needs line v + 1, whole (an aligned load) for v + 1 < full.
    for (; v + kC < full; v += kC)
#pragma GCC unroll 8
      for (int q = 0; q < kC; ++q) {
        const __m512i hi = _mm512_load_si512(base + 64 * (v + q + 1));
        _mm_prefetch(base + 64 * (v + q + 1) + kRowAhead, _MM_HINT_T0);
        acc[q] = Ops::mac(acc[q], Ops::load(A + (v + q) * W, W), join(lo, hi));
        lo = hi;
      }
    for (; v < full; ++v) {
      const __m512i hi = v + 1 < full ? _mm512_load_si512(base + 64 * (v + 1)) : edge(v + 1);
      acc[v % kC] = Ops::mac(acc[v % kC], Ops::load(A + v * W, W), join(lo, hi));
      lo = hi;
    }
  }
  if (const int64_t k = full * W; k < K)  // the last, partial vector
    acc[full % kC] = Ops::mac(acc[full % kC], Ops::load(A + k, K - k), Ops::load(B + k, K - k));
  for (int w = kC / 2; w >= 1; w /= 2)
    for (int q = 0; q < w; ++q) acc[q] = _mm512_add_ps(acc[q], acc[q + w]);
  const __m512 four[4] = {acc[0], _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  float sums[4];
  reduce4(four, sums);
  store(sums[0], alpha, beta, bias, c);
}

template <class Ops>
using Block = void (*)(int64_t, float, const typename Ops::E*, int64_t, const typename Ops::E*,
                       int64_t, const typename Ops::E*, unsigned, float, const float*, float*,
                       int64_t);

// Every shape up to kR x kJ (C's edges): table[(R - 1) * kJ + J - 1].
template <class Ops, int... Is>
constexpr std::array<Block<Ops>, kR * kJ> block_table(std::integer_sequence<int, Is...>) {
  return {block<Ops, Is / kJ + 1, Is % kJ + 1>...};
}

// All of C [M, N], block by block: kJ rows of B at a time, each met by
// every row block of A, which between them fetch the rows of B two blocks
// on (row r by pass r mod passes: the fetches spread over the block's
// time). Measured over the MiniLM's 24 float32 GEMMs at 16 rows (perf stat
// task-clock, 3 runs each on a machine shared with a build): the next
// block's rows all fetched into L1 by the first pass, with the sums reduced
// through a copy in memory, took 1580-1700 ms of CPU; two blocks on into L2
// and the sums reduced in registers 1340-1510; spread over the passes
// 1220-1370.
//
// One row of A (a decoded token) reads B one row after another (row()):
// a single stream the hardware prefetchers follow from page to page
// (fetched ahead only where the rows are off their lines). kJ rows read
// side by side are kJ streams one row length apart, and those do not
// reach the memory bandwidth a plain read does.
// Measured over TinyLlama's bf16 weights (2.07 GB mapped from the file, 2
// threads, Zen 5, alternated): kJ rows at once 50-56 GB/s, one row 66-72, a
// plain sum of the same bytes 79; over its float32 weights (4.14 GB), one
// row in one chain 67-70 GB/s, in two chains 76-80, the plain sum 80 (in
// 4 KiB pages; four chains since).
template <class Ops>
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const typename Ops::E* A, int64_t lda,
          const typename Ops::E* B, int64_t ldb, float beta, const float* bias, float* C,
          int64_t ldc) {
  static constexpr auto blocks = block_table<Ops>(std::make_integer_sequence<int, kR * kJ>{});
  if (M == 1) {
    for (int64_t j = 0; j < N; ++j) row<Ops>(K, alpha, A, B + j * ldb, beta, bias ? bias + j : nullptr, C[j]);
    return;
  }
  const int64_t passes = (M + kR - 1) / kR;
  for (int64_t j = 0; j < N; j += kJ) {
    const int nj = static_cast<int>(N - j < kJ ? N - j : kJ);
    for (int64_t i = 0; i < M; i += kR) {
      const int ni = static_cast<int>(M - i < kR ? M - i : kR);
      const bool prefetch = j + 3 * kJ <= N;
      unsigned rows = 0;  // this pass's share of the rows to fetch
      for (int r = 0; r < kJ; ++r)
        if (r % passes == (i / kR) % passes) rows |= 1u << r;
      blocks[(ni - 1) * kJ + nj - 1](K, alpha, A + i * lda, lda, B + j * ldb, ldb,
                                     prefetch ? B + (j + 2 * kJ) * ldb : nullptr, rows, beta,
                                     bias ? bias + j : nullptr, C + i * ldc + j, ldc);
    }
  }
}

}  // namespace qkv::kernels::dot
