// flash_backward.h: the fast exact attention backward (float32, and bf16 on
// vdpbf16ps).
#pragma once

#include "core/attention_problem.h"
#include "core/isa_kernels.h"

namespace qkv::kernels {

// Same contract as ref::attention_backward (qkv/attention.h) for float32
// tensors, given also the forward's out (for D_i = dout_i · out_i). Scores
// are recomputed tile by tile from lse (FlashAttention-2), so nothing of size
// N x S exists; extra memory is one scratch buffer of tile size per thread.
// Results are bitwise identical for any thread count.
// q, k and v come from p (rows of any stride, innermost dim contiguous);
// out, lse and dout from `in`, C-ordered; g's tensors already sized.
void flash_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                    int threads, const IsaKernels& isa);

// bfloat16 q, k, v (p) and dout (in.dout, C-ordered), out bf16 or float32
// (in.out_bf16), lse float32; g's tensors float32, already sized: the
// gradients accumulate in float32. All five products run on pairs of bf16
// with P and dS rounded to bf16 (flash_backward_bf16.cpp). isa must be
// the table of avx512bf16 or amx (qkv::Error otherwise). Bitwise identical for any
// thread count.
void flash_backward_bf16(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                         int threads, const IsaKernels& isa);

}  // namespace qkv::kernels
