// The extension's test hooks (_qkv._testing): what tests/python/test_views.py
// reads to prove that the kernel ran on the caller's buffers, and a model's
// forward in float64 for tests/python/test_bert_minilm.py. Not part of the
// package's interface.
#pragma once

#include <nanobind/nanobind.h>

#include "qkv/view.h"

namespace qkvpy {

// Records the data pointers of the query, key and value handed to the op.
void record_inputs(const qkv::TensorView& q, const qkv::TensorView& k, const qkv::TensorView& v);

// _qkv._testing: input_copies(), last_pointers(), hidden_states_f64(),
// matrices_dtype(), mapped_weight_bytes(), packed_weight_bytes() and
// weight_matmul_tiles().
void bind_testing(nanobind::module_& m);

}  // namespace qkvpy
