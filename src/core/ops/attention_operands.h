// attention_operands.h: the op's views turned into what the kernels address
// (core/attention_problem.h), once, at the op boundary.
#pragma once

#include "core/attention_problem.h"

namespace qkv {

// Fills p.q, p.k and p.v (p's sizes already checked). An input whose last
// dim is contiguous is read in place; any other is copied once, C-ordered,
// into p.copies (and counted by input_copies()).
void bind_inputs(AttentionProblem& p, const TensorView& q, const TensorView& k,
                 const TensorView& v);

// The mask broadcast over lead + [Hq, N, S], typed (MaskView). Throws
// qkv::Error if it does not broadcast, or if an additive mask holds NaN or
// +inf.
MaskView bind_mask(const TensorView& mask, const AttentionProblem& p);

// `t` as a C-ordered array: its own memory when already C-ordered, else a
// copy kept in `keep` (counted by input_copies()).
const void* contiguous_data(const TensorView& t, std::vector<Tensor>& keep);

// Throws qkv::Error naming `what` and the first index (in C order) holding
// NaN or Inf. Any strides.
void check_finite(const TensorView& t, const char* what);

// How many inputs the op has copied in this process (for tests that prove a
// strided input, such as a KV-cache slice, is read in place).
int64_t input_copies();

}  // namespace qkv
