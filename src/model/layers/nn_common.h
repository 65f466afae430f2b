// nn/nn_common.h: what the float32 layers share: when to use threads, and a
// vectorisable row sum whose order does not depend on the machine.
//
// Determinism: every op is either row-wise (each output row computed by one
// thread, from its own inputs only) or a sum over rows done per block of
// columns (each column summed by one thread, rows in order). Either way the
// result does not depend on how OpenMP splits the loop, so it is bitwise
// identical for any thread count.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/runtime/parallel.h"
#include "qkv/tensor.h"  // bfloat16

namespace qkv::nn::detail {

// Below this many elements an op runs on the calling thread (sampling calls
// the layers with BT = 1): core/runtime/parallel.h's threshold.
using qkv::kParallelMin;

// Sums over rows run per block of this many columns (one vector of AVX-512).
inline constexpr int64_t kColBlock = 16;

// Element-wise passes over n elements run f(begin, count) on fixed chunks
// of kChunk, the chunks split between the threads; each element is computed
// alone, so the split changes nothing in the result.
inline constexpr int64_t kChunk = 4096;
template <class F>
void for_chunks(int64_t n, F f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// One head's D features from RoPE's adjacent pairs (x_0, x_{D/2}, x_1,
// x_{D/2+1}, ...: a GGUF llama file's q and k rows) to halves (x_0 ..
// x_{D/2-1}, x_{D/2} ..), the order the model computes in.
template <class T>
inline void unpair_head(const T* from, T* to, int64_t D) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    to[i] = from[2 * i];
    to[half + i] = from[2 * i + 1];
  }
}

// dst [n] = the float32 values fill(buf, i0, m) writes into buf [m] for
// elements i0 .. i0+m-1, rounded to bf16 (a bf16 Linear's input). In
// blocks through a float32 buffer on the stack: GCC vectorises each loop on
// its own, but not a loop that computes and rounds at once (two selects of
// different widths). Inlined into multi-versioned spans, which it then
// vectorises with their ISA.
template <class F>
[[gnu::always_inline]] inline void store_rounded(bfloat16* dst, int64_t n, F fill) {
  constexpr int64_t kBlock = 256;
  float buf[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    fill(buf, i0, m);
    for (int64_t i = 0; i < m; ++i) dst[i0 + i] = bf16_from_float(buf[i]);
  }
}

// Σ_{c < n} f(c) in Acc (float by default), in 8 interleaved partial sums
// combined in a fixed order: the compiler turns the lanes into one SIMD
// register (a single running sum is a chain of dependent adds it may not
// reorder), and the order is the same on every machine.
template <class Acc = float, class F>
inline Acc lane_sum(int64_t n, F f) {
  constexpr int kLanes = 8;
  Acc acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += f(c + l);
  for (int l = 0; c < n; ++c, ++l) acc[l] += f(c);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace qkv::nn::detail
