// qkv/peak.h: this machine's measured limits, the yardsticks `qkv bench`
// reports its numbers against (a fraction of a measured peak, not of a
// datasheet figure, since a VM's clocks and memory are whatever they are).
#pragma once

#include <cstddef>

#include "qkv/runtime.h"

namespace qkv {

// Single-precision FMA throughput, GFLOP/s (one FMA = 2 flops), of `threads`
// threads running at once, each on register-resident independent FMA chains
// of the widest vectors `isa` has. Takes about `seconds`; the best of a few
// trials within them is returned.
double measure_fma_gflops(Isa isa, int threads, double seconds = 0.08);

// Memory read bandwidth, GB/s (1e9 bytes/s): `threads` threads stream-read a
// buffer of `bytes` (far larger than the caches), touched once beforehand so
// page faults are not counted; the best of a few passes.
double measure_read_gbps(int threads, size_t bytes = size_t{256} << 20);

}  // namespace qkv
