// attention_checks.h: argument checks done once, at the op boundary.
//
// The op validates its arguments here and passes the kernels an
// AttentionProblem (core/attention_problem.h).
#pragma once

#include "core/attention_problem.h"

namespace qkv {

// When check_finite scans k and v: before anything runs (now), or later
// (deferred): by the kernel as it reads them, or by finish_kv_checks.
enum class KvScanTiming { now, deferred };

// Validates q, k, v and the options (shapes, dtypes, finiteness, mask
// broadcast, scale) and returns the problem description, with q, k, v and
// the mask bound for the kernels (attention_operands.h). Throws qkv::Error.
AttentionProblem check_attention_args(const TensorView& q, const TensorView& k,
                                      const TensorView& v, const AttentionOptions& opts,
                                      KvScanTiming kv_timing = KvScanTiming::now);

// Completes a deferred k/v check: from what a kernel saw (`seen`, when all
// it made was finite), else by scanning k and v whole, which throws
// qkv::Error naming the first NaN or Inf; finite inputs behind a kernel's
// report mean float32 overflowed, and scores_fit_f32 turns false (the op
// then redoes the problem on the reference). Without a report, scores_fit_f32
// is set from the largest |k|. Nothing to do unless p.kv_scan_pending.
void finish_kv_checks(AttentionProblem& p, const TensorView& k, const TensorView& v,
                      const KvScan* seen = nullptr);
// opts.threads resolved: 0 means all cores; negative is an error.
int resolve_threads(int requested);
// Reuses `t` when it already has this dtype and shape (no allocation, no
// fresh pages to fault in), else replaces it.
void fit_tensor(Tensor& t, DType dtype, const Shape& shape);

}  // namespace qkv
