// flash_forward.h: the fast exact attention forward (float32 and bfloat16 inputs).
#pragma once

#include "core/attention_problem.h"
#include "core/isa_kernels.h"

namespace qkv::kernels {

// Same contract as ref::attention_forward (semantics in qkv/attention.h) for
// float32 tensors: tiled online softmax, no N x S matrix, extra memory
// bounded by threads x tile sizes. Results are bitwise identical for any
// thread count: every output row is computed by one thread in a fixed order,
// and the split-KV partials of the decode path merge in a fixed order.
// q, k and v come from p (rows of any stride, innermost dim contiguous);
// res's tensors are already sized, C-ordered. `isa`: the path's kernels.
void flash_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                   bool want_lse, int threads, const IsaKernels& isa);

}  // namespace qkv::kernels
