// attention_checks.h: argument checks done once, at the op boundary.
//
// The op validates its arguments here and passes the kernels an
// AttentionProblem (core/attention_problem.h).
#pragma once

#include "core/attention_problem.h"

namespace qkv {

// Validates q, k, v and the options (shapes, dtypes, finiteness, mask
// broadcast, scale) and returns the problem description. Throws qkv::Error.
AttentionProblem check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionOptions& opts);

// The kernel that runs: automatic picks fast for float32 and the reference
// for float64; fast with float64 is an error. Shared by forward and backward.
Kernel resolve_kernel(Kernel requested, DType dtype);
// opts.threads resolved: 0 means all cores; negative is an error.
int resolve_threads(int requested);
// Reuses `t` when it already has this dtype and shape (no allocation, no
// fresh pages to fault in), else replaces it.
void fit_tensor(Tensor& t, DType dtype, const Shape& shape);

// Throws qkv::Error naming `what` and the first index holding NaN or Inf.
void check_finite(const Tensor& t, const char* what);

}  // namespace qkv
