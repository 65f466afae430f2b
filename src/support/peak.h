// support/peak.h: this machine's measured limits, the yardsticks `qkv bench`
// reports its numbers against (a fraction of a measured peak, not of a
// datasheet figure, since a VM's clocks and memory are whatever they are).
#pragma once

#include <cstddef>
#include <string>

#include "qkv/runtime.h"

namespace qkv {

// Single-precision FMA throughput, GFLOP/s (one FMA = 2 flops), of `threads`
// threads running at once, each on register-resident independent FMA chains
// of the widest vectors `isa` has. Takes about `seconds`, cut into 5 windows
// of 100 ms by default; the best window is returned (on a shared machine
// one short window could lose a time slice: 27 ms windows swung 231-327
// GFLOP/s run to run on a Xeon, issue 12).
double measure_fma_gflops(Isa isa, int threads, double seconds = 0.5);

// Memory read bandwidth, GB/s (1e9 bytes/s): `threads` threads stream-read a
// buffer of `bytes`, touched once beforehand so page faults are not counted;
// the best of a few passes. bytes = 0 sizes it from the L3: 4x
// l3_cache_bytes(), at least 256 MiB (a fixed 256 MiB fit a 300 MiB Xeon L3
// and reported decode at 120-210% of "bandwidth").
double measure_read_gbps(int threads, size_t bytes = 0);

// The L3 size of CPU 0 (sysfs cache/index3/size), 0 if it cannot be read.
size_t l3_cache_bytes();

// The CPU's model name from /proc/cpuinfo ("AMD EPYC 9R14 96-Core Processor"),
// "unknown CPU" if absent.
std::string cpu_model_name();

}  // namespace qkv
