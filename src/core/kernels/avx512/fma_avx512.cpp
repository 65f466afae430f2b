// fma_avx512.cpp: the FMA peak's block of chains on 16-lane AVX-512 vectors (contract in
// core/fma_probe.h).
#include <immintrin.h>

#include <cstdint>

#include "core/fma_probe.h"

namespace qkv::kernels {
namespace {

float block() {
  __m512 acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < kFmaBlockIters; ++it)
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < kFmaChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  float s = 0.0f;
  for (float x : lanes) s += x;
  return s;
}

}  // namespace

constinit const FmaProbe fma_avx512{block, 16};

}  // namespace qkv::kernels
