// attention_backward_ref.h: the plain maths of the attention backward pass,
// the contract the fast backward is tested against.
#pragma once

#include "core/attention_problem.h"

namespace qkv::ref {

// Gradients of out = attention(q, k, v) for one checked problem p, given the
// forward's lse [..., Hq, N] and dout [..., Hq, N, Dv]; float32 or float64,
// all in q's dtype. For every row (b, h, i) and key j it recomputes the score
// s_ij exactly as the forward does (score_row), then
//   p_ij  = exp(s_ij - lse_i)         (0 when lse_i = -inf: a row with no key)
//   dp_ij = dout_i · v_j,   D_i = Σ_j p_ij dp_ij
//   ds_ij = p_ij (dp_ij - D_i) · cap'(x_ij) · scale
//   dq_i += ds_ij k_j,  dk_j += ds_ij q_i,  dv_j += p_ij dout_i
// with k_j, v_j of the shared key/value head h / group, so a GQA group's
// heads sum into it. Every sum is accumulated in double; results are rounded
// to q's dtype once. g's tensors must already have their shapes and dtype.
// q, k and v are read through p (any row strides); lse and dout from `in`.
// D_i comes from the weights themselves rather than from dout · out, so the
// reference needs no `out` and stays exact when the forward's out is rounded.
void attention_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in);

}  // namespace qkv::ref
