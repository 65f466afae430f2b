// flash_decode.cpp: the forward for N <= kDecodeRows (flash_block.h).
//
// Decode has too few rows to keep two cores busy, so S is cut into chunks
// of kSplitKeys; each (batch, key/value head, chunk) runs as one block and
// leaves per-row partials (m, l, O[Dv]), which merge per row in chunk order
// by their log-sum-exp. The chunk size is a constant, not a function of the
// thread count, which keeps results bitwise reproducible.
#include <algorithm>
#include <cmath>

#include "core/kernels/flash_block.h"
#include "core/runtime/interrupt.h"

namespace qkv::kernels::fwd {
namespace {

constexpr int64_t kSplitKeys = 512;

}  // namespace

void decode(const Ctx& c, const OutRows& out, float* lse, int threads) {
  const AttentionProblem& p = c.p;
  const int64_t chunks = (p.S + kSplitKeys - 1) / kSplitKeys;
  const int64_t rows = p.group * p.N;  // per (batch, key/value head)
  const int64_t rec = 2 + p.Dv;        // m, l, O
  float* partial = caller_scratch(static_cast<size_t>(p.B * p.Hkv * chunks * rows * rec));
  TeamWorkspaces team(p, threads);
  const int64_t items = p.B * p.Hkv * chunks;
  // Static, contiguous items per thread: consecutive chunks of a head are
  // consecutive in memory, so each core streams one run of K and V and its
  // hardware prefetcher never loses the stream at a chunk boundary (chunks
  // are equal work; dynamic scheduling interleaved them, ~4% slower).
  Interrupt interrupt;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t it = 0; it < items; ++it) {
    if (interrupt.stop()) continue;
    const int64_t bg = it / chunks, ch = it % chunks;
    const Block blk{bg / p.Hkv, bg % p.Hkv, 0, static_cast<int>(p.N), ch * kSplitKeys,
                    std::min(p.S, (ch + 1) * kSplitKeys)};
    Workspace& ws = team.mine();
    make_workspace(p, blk, team.scratch.slot(), ws);
    ws.scan = p.kv_scan ? &team.scans[omp_get_thread_num()] : nullptr;
    run_block(c, blk, ws);
    // Partial rows in (head, position) order, whatever the panel layout.
    float* dst = partial + it * rows * rec;
    for (const Panel& pn : ws.panels)
      for (int r = 0; r < pn.rows(); ++r, dst += rec) {
        dst[0] = pn.m[r];
        dst[1] = pn.l[r];
        for (int64_t e = 0; e < p.Dv; ++e) dst[2 + e] = pn.O[r * p.Dv + e];
      }
  }
  interrupt.throw_if_stopped();
  // Merge: M = max_c m_c, L = sum_c l_c e^(m_c - M), O = sum_c O_c e^(m_c - M) / L,
  // summed in a row of the thread's workspace (free again here).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t bg = 0; bg < p.B * p.Hkv; ++bg)
    for (int64_t r = 0; r < rows; ++r) {
      auto part = [&](int64_t ch) { return partial + ((bg * chunks + ch) * rows + r) * rec; };
      // Row r of key/value head g is query head g*group + r/N, position r%N.
      const int64_t row = ((bg / p.Hkv) * p.Hq + (bg % p.Hkv) * p.group) * p.N + r;
      float* o = team.scratch.slot();  // the row's sum [Dv], this thread's
      float M = -INFINITY;
      for (int64_t ch = 0; ch < chunks; ++ch) M = std::fmax(M, part(ch)[0]);
      for (int64_t e = 0; e < p.Dv; ++e) o[e] = 0.0f;
      float L = 0.0f;
      for (int64_t ch = 0; ch < chunks && M != -INFINITY; ++ch) {
        const float* pc = part(ch);
        if (pc[1] == 0.0f) continue;
        const float w = std::exp(pc[0] - M);
        L += pc[1] * w;
        for (int64_t e = 0; e < p.Dv; ++e) o[e] += pc[2 + e] * w;
      }
      const float inv = L > 0.0f ? 1.0f / L : 0.0f;  // no chunk saw a key: 0
      for (int64_t e = 0; e < p.Dv; ++e) out.put(row * p.Dv + e, o[e] * inv);
      if (lse) lse[row] = L > 0.0f ? M + std::log(L) : -INFINITY;
    }
  if (p.kv_scan) {
    // A NaN or Inf in a value row read makes its output NaN or Inf (w * inf,
    // 0 * inf and NaN all stay), as does an accumulator past float32's
    // range; with the raw scores' sums that is everything to report.
    float bad = 0.0f;
    for (const ScanState& s : team.scans)
      for (float x : s.acc) bad += x;
    const int64_t n = p.B * p.Hq * p.N * p.Dv;
    for (int64_t x = 0; x < n; ++x) bad += out.get(x) - out.get(x);
    p.kv_scan->bad = bad != 0.0f;
  }
}

}  // namespace qkv::kernels::fwd
