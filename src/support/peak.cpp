#include "support/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "core/isa_kernels.h"

namespace qkv {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double measure_fma_gflops(Isa isa, int threads, double seconds) {
  const kernels::FmaProbe& probe = *kernels::isa_kernels(isa).fma;
  const double flops_per_block = 2.0 * kernels::kFmaChains * probe.lanes * kernels::kFmaBlockIters;
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
      for (const auto t0 = Clock::now(); seconds_since(t0) < 0.005;) sink += probe.block();
#pragma omp barrier
      const auto t0 = Clock::now();
      int64_t blocks = 0;
      double elapsed = 0.0;
      do {
        sink += probe.block();
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
