// attention_ref.h: the plain attention maths, the contract for every kernel.
#pragma once

#include "core/attention_problem.h"

namespace qkv::ref {

// Row i of query head h in batch element b: s[j] for every key j < S is the
// score the softmax sees, cap(scale · q_i·k_j) + ALiBi + additive mask, or
// -inf where causal, window, key_lengths or a bool mask hide key j. qi is
// q[b,h,i,:]; k[b,h/group,j,:] is read from p.k. With dcap, also dcap[j] =
// d cap(x)/dx at x = scale · q_i·k_j: 1 - tanh²(x/c), or 1 without soft-cap
// (the backward's chain rule). The forward and the backward share it, so
// they cannot disagree on which keys a row sees.
void score_row(const AttentionProblem& p, const float* qi, int64_t b, int64_t h, int64_t i,
               double* s, double* dcap = nullptr);
void score_row(const AttentionProblem& p, const double* qi, int64_t b, int64_t h, int64_t i,
               double* s, double* dcap = nullptr);

// out[b,h,i,:] = sum_j softmax_j(cap(scale * q[b,h,i,:]·k[b,g,j,:]) + bias) * v[b,g,j,:]
// with g = h / group, bias = ALiBi + additive mask, and -inf for every key
// that causal, window, key_lengths or a bool mask hides. Shapes as in
// qkv/attention.h; q, k, v are read through p (any row strides); the problem
// is already checked and res's tensors sized. Every sum is accumulated in
// double (bfloat16 inputs widened exactly); results are rounded once, to
// the dtype of each result tensor.
void attention_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                       bool want_lse);

}  // namespace qkv::ref
