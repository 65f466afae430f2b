/// @file
/// qkv/softmax.h: numerically stable softmax over the last axis.
#pragma once

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

/// y[..., j] = exp(x[..., j] - m) / sum_j exp(x[..., j] - m), m = max_j x[..., j].
/// -inf entries get weight 0; a row that is all -inf gives all zeros (never
/// NaN); +inf or NaN in x is rejected with qkv::Error. Accumulates in double;
/// the result has x's dtype (float32 or float64).
QKV_API Tensor softmax(const Tensor& x);

}  // namespace qkv
