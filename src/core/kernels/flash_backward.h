// flash_backward.h: the fast exact attention backward (float32).
#pragma once

#include "core/attention_problem.h"
#include "qkv/runtime.h"

namespace qkv::kernels {

// Same contract as ref::attention_backward (qkv/attention.h) for float32
// tensors, given also the forward's out (for D_i = dout_i · out_i). Scores
// are recomputed tile by tile from lse (FlashAttention-2), so nothing of size
// N x S exists; extra memory is one scratch buffer of tile size per thread.
// Results are bitwise identical for any thread count.
// q, k and v come from p (rows of any stride, innermost dim contiguous);
// out, lse and dout from `in`, C-ordered; g's tensors already sized.
void flash_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                    int threads, Isa isa);

}  // namespace qkv::kernels
