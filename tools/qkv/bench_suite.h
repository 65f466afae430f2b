// bench_suite.h: what `qkv bench` measures. A case is one attention problem;
// its work is counted exactly (only the (query, key) pairs a mask leaves
// visible), and measuring it means timing the chosen kernel and the reference
// on the same random inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qkv/attention.h"

namespace qkv::cli {

// q [B, Hq, N, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], all of `dtype`.
struct BenchCase {
  int64_t batch = 1, heads = 8, kv_heads = 8, n = 1024, s = 1024, d = 64, dv = 64;
  Causal causal = Causal::none;
  std::optional<int64_t> window;  // keys a query may see left of its diagonal; right side 0
  // float32, or bf16: inputs made in float32 and rounded before timing;
  // out in bf16 too (as PyTorch's bf16 SDPA returns).
  DType dtype = DType::f32;
};

// "B1 H32/8 N1 S4096 D128", plus " Dv<dv>", " top-left" / " bottom-right"
// and " window<L>" and " bf16" when they apply.
std::string case_label(const BenchCase& c);

// Few queries against a long K/V: memory-bound, so bandwidth is reported too.
bool is_decode(const BenchCase& c);

// Keys first..last (inclusive; none when last < first) that query i sees:
// the same rule as qkv::attention (see qkv/attention.h).
struct KeyRange {
  int64_t first, last;
};
KeyRange visible_keys(const BenchCase& c, int64_t i);

// Visible (query, key) pairs over the whole problem.
int64_t visible_pairs(const BenchCase& c);

// Flops of the visible pairs only: 2·D for the score q·k and 2·Dv for adding
// weight · v into the output (4·D per pair when D = Dv).
double case_flops(const BenchCase& c);

// Bytes of K and V (in c.dtype) the kernel must read at least once: for each
// key/value head, the keys some query of its group sees. GQA heads share them.
double kv_bytes(const BenchCase& c);

// The standard shapes: B=1, H=8, N=S in {512, 1024, 2048, 4096},
// D in {64, 128}, non-causal and causal; GQA 32/8 heads, D=128, N=S=2048;
// decode 32/8 heads, D=128, N=1, S in {4096, 32768}; one head, D=64,
// N=S=65536.
std::vector<BenchCase> standard_suite();

struct BenchSettings {
  Kernel kernel = Kernel::automatic;
  int threads = 1;  // resolved: never 0
  int reps = 5;
  int warmup = 1;
  bool compare_reference = false;
  // Include qkv::attention's scan of q, k, v for NaN/Inf (one extra read of
  // the inputs; it doubles decode's memory traffic). Off: time the kernel.
  bool check_finite = false;
};

// What one case measured. Plain data, so it can cross a pipe from the child
// process that measured it.
struct CaseResult {
  double median_ms;   // the chosen kernel, median of reps
  double rss_mb;      // peak RSS (MiB) after the timed runs, before the reference runs
  double ref_ms;      // the reference kernel, for the whole problem
  int64_t ref_rows;   // 0: timed on the whole problem; else rows of one head, scaled by pairs
  double max_abs_err; // kernel vs reference on the reference's rows; < 0 if not compared
};

// Times one case in this process: random inputs (fixed seeds) allocated and
// touched once, `warmup` untimed runs, `reps` timed ones, then the reference.
CaseResult measure_case(const BenchCase& c, const BenchSettings& s);

}  // namespace qkv::cli
