// fma_scalar.cpp: the FMA peak's block of chains in plain C++ (contract in
// core/fma_probe.h).
#include <cstdint>

#include "core/fma_probe.h"

namespace qkv::kernels {
namespace {

// Baseline x86-64 code: a multiply and an add (no FMA below AVX2); the
// compiler may pack the chains into SSE2 vectors, as it may in scalar kernels.
float block() {
  float acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = static_cast<float>(c);
  for (int64_t it = 0; it < kFmaBlockIters; ++it)
#pragma GCC unroll 12
    for (int c = 0; c < kFmaChains; ++c) acc[c] = acc[c] * 0.999f + 0.001f;
  float s = 0.0f;
  for (float x : acc) s += x;
  return s;
}

}  // namespace

constinit const FmaProbe fma_scalar{block, 1};

}  // namespace qkv::kernels
