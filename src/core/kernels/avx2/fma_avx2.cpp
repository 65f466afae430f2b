// fma_avx2.cpp: the FMA peak's block of chains on 8-lane AVX2 vectors with FMA (contract in
// core/fma_probe.h).
#include <immintrin.h>

#include <cstdint>

#include "core/fma_probe.h"

namespace qkv::kernels {
namespace {

float block() {
  __m256 acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < kFmaBlockIters; ++it)
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < kFmaChains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0.0f;
  for (float x : lanes) s += x;
  return s;
}

}  // namespace

constinit const FmaProbe fma_avx2{block, 8};

}  // namespace qkv::kernels
