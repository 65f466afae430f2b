// attention_checks.h: argument checks done once, at the op boundary.
//
// The op validates its arguments here and passes the kernels an
// AttentionProblem (core/attention_problem.h).
#pragma once

#include "core/attention_problem.h"

namespace qkv {

// Validates q, k, v and the options (shapes, dtypes, finiteness, mask
// broadcast, scale) and returns the problem description, with q, k, v and
// the mask bound for the kernels (attention_operands.h). Throws qkv::Error.
AttentionProblem check_attention_args(const TensorView& q, const TensorView& k,
                                      const TensorView& v, const AttentionOptions& opts);
// opts.threads resolved: 0 means all cores; negative is an error.
int resolve_threads(int requested);
// Reuses `t` when it already has this dtype and shape (no allocation, no
// fresh pages to fault in), else replaces it.
void fit_tensor(Tensor& t, DType dtype, const Shape& shape);

}  // namespace qkv
