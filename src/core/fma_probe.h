// fma_probe.h: the block of register-resident FMA chains that
// measure_fma_gflops (runtime/peak.cpp) times, one version per path
// (kernels/<isa>/fma_<isa>.cpp), reached through the path's table
// (core/isa_kernels.h).
#pragma once

#include <cstdint>

namespace qkv::kernels {

// Independent accumulator chains per thread. An FMA's result is ready about 4
// cycles after issue and current cores issue 2 per cycle, so at least 8 chains
// must be in flight to keep both pipes busy; 12 leaves slack and, with the two
// constants, still fits in AVX2's 16 registers.
constexpr int kFmaChains = 12;
// One block is ~50k FMAs (tens of microseconds), so reading the clock once
// per block costs nothing measurable. The chain loops are unrolled so the
// accumulators stay in registers at any optimisation level above -O1 (at
// -O2 GCC 12 kept them in memory and measured under half the peak).
constexpr int64_t kFmaBlockIters = 4096;

// A block runs kFmaBlockIters steps acc = acc * a + b on each of kFmaChains
// chains of vectors of `lanes` floats; with a < 1 the values settle near
// b / (1 - a) = 1, never overflowing or going subnormal (which would slow
// some cores down). The sum is returned so nothing is dead code.
struct FmaProbe {
  float (*block)();
  int lanes;  // floats per vector
};

// The probes of kernels/{scalar,avx2,avx512}/; the float32 FMA peak stays the
// yardstick on avx512bf16 and amx, whose tables use avx512's.
extern const FmaProbe fma_scalar;
extern const FmaProbe fma_avx2;
extern const FmaProbe fma_avx512;

}  // namespace qkv::kernels
