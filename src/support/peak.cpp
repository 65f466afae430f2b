#include "support/peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

namespace qkv {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Independent accumulator chains per thread. An FMA's result is ready about 4
// cycles after issue and current cores issue 2 per cycle, so at least 8 chains
// must be in flight to keep both pipes busy; 12 leaves slack and, with the two
// constants, still fits in AVX2's 16 registers.
constexpr int kChains = 12;
// One block is ~50k FMAs (tens of microseconds), so reading the clock once
// per block costs nothing measurable. The chain loops are unrolled so the
// accumulators stay in registers at any optimisation level above -O1 (at
// -O2 GCC 12 kept them in memory and measured under half the peak).
constexpr int64_t kBlockIters = 4096;

// Each block runs acc = acc * a + b on every chain; with a < 1 the values
// settle near b / (1 - a) = 1, never overflowing or going subnormal (which
// would slow some cores down). The sum is returned so nothing is dead code.
__attribute__((target("avx512f"))) float fma_block_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < kBlockIters; ++it)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < kChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  float s = 0.0f;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx2,fma"))) float fma_block_avx2() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < kBlockIters; ++it)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < kChains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0.0f;
  for (float x : lanes) s += x;
  return s;
}

// Baseline x86-64 code: a multiply and an add (no FMA below AVX2); the
// compiler may pack the chains into SSE2 vectors, as it may in scalar kernels.
float fma_block_scalar() {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = static_cast<float>(c);
  for (int64_t it = 0; it < kBlockIters; ++it)
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999f + 0.001f;
  float s = 0.0f;
  for (float x : acc) s += x;
  return s;
}

struct FmaBlock {
  float (*run)();
  int lanes;  // floats per vector
};

FmaBlock fma_block_for(Isa isa) {
  switch (isa) {
    case Isa::amx:
    case Isa::avx512bf16:  // the float32 FMA peak: the yardstick stays fp32 FMAs
    case Isa::avx512: return {fma_block_avx512, 16};
    case Isa::avx2: return {fma_block_avx2, 8};
    case Isa::scalar: break;
  }
  return {fma_block_scalar, 1};
}

}  // namespace

double measure_fma_gflops(Isa isa, int threads, double seconds) {
  const FmaBlock block = fma_block_for(isa);
  const double flops_per_block = 2.0 * kChains * block.lanes * kBlockIters;
  // The best of a few short trials: a peak is what the machine can do, and
  // on a shared machine one trial may lose a time slice to another process.
  constexpr int kTrials = 5;
  double best = 0.0;
  float sink = 0.0f;
  for (int trial = 0; trial < kTrials; ++trial) {
    double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total, sink)
    {
      // Warm-up, so every thread is running and clocks have ramped before
      // any thread starts its timed loop.
      for (const auto t0 = Clock::now(); seconds_since(t0) < 0.005;) sink += block.run();
#pragma omp barrier
      const auto t0 = Clock::now();
      int64_t blocks = 0;
      double elapsed = 0.0;
      do {
        sink += block.run();
        ++blocks;
        elapsed = seconds_since(t0);
      } while (elapsed < seconds / kTrials);
      total += static_cast<double>(blocks) * flops_per_block / elapsed * 1e-9;
    }
    best = std::max(best, total);
  }
  volatile float keep = sink;
  (void)keep;
  return best;
}

size_t l3_cache_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  size_t n = 0;
  char unit = 0;
  if (!(f >> n)) return 0;
  f >> unit;  // "32768K"
  if (unit == 'K') n <<= 10;
  if (unit == 'M') n <<= 20;
  if (unit == 'G') n <<= 30;
  return n;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const size_t start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? line.substr(colon + 1) : line.substr(start);
      }
    }
  return "unknown CPU";
}

double measure_read_gbps(int threads, size_t bytes) {
  if (bytes == 0) bytes = std::max(size_t{256} << 20, 4 * l3_cache_bytes());
  const int64_t n = static_cast<int64_t>(bytes / sizeof(uint64_t));
  // Uninitialised on purpose: the loop below is the first touch, done by the
  // threads (same static split) that read those pages later.
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<uint64_t>(i);

  // Integer sums: reassociating them is exact, so the compiler vectorises the
  // loop and it runs far faster than memory can feed it. Pass 0 only warms
  // the TLB and is not counted.
  double best = 0.0;
  uint64_t sink = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto t0 = Clock::now();
    uint64_t sum = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += buf[i];
    const double dt = seconds_since(t0);
    sink += sum;
    if (pass > 0) best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / dt * 1e-9);
  }
  volatile uint64_t keep = sink;
  (void)keep;
  return best;
}

}  // namespace qkv
