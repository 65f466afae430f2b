// attention_ref.h: the plain attention maths, the contract for every kernel.
#pragma once

#include "core/shape_checks.h"

namespace qkv::ref {

// out[b,h,i,:] = sum_j softmax_j(cap(scale * q[b,h,i,:]·k[b,g,j,:]) + bias) * v[b,g,j,:]
// with g = h / group, bias = ALiBi + additive mask, and -inf for every key
// that causal, window, key_lengths or a bool mask hides. Shapes as in qkv/attention.h, problem already checked.
// Every sum is accumulated in double; results are rounded to q's dtype once.
void attention_forward(AttentionResult& res, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionProblem& p, bool want_weights, bool want_lse);

}  // namespace qkv::ref
