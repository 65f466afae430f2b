// arrays.h: NumPy arrays and DLPack tensors <-> qkv views and Tensors, with
// no copy either way.
//
// In: a nanobind ndarray (NumPy through the buffer protocol, PyTorch and any
// other DLPack producer through __dlpack__) becomes a TensorView of the same
// memory: its pointer, dtype, shape and strides (nanobind counts strides in
// elements, as qkv does). Out: a qkv Tensor moves onto the heap and is handed
// to NumPy or PyTorch with a capsule that owns it, so the caller's array is
// the Tensor's own 64-byte-aligned buffer.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "qkv/tensor.h"
#include "qkv/view.h"

namespace qkvpy {

namespace nb = nanobind;
using Array = nb::ndarray<nb::ro>;

// The array as a view; `what` names it in errors. TypeError for a dtype qkv
// does not take or a tensor that is not in CPU memory.
qkv::TensorView view_of(const Array& a, const char* what);

// Which kind of array the caller gave, so results come back as the same.
enum class Framework { numpy, torch };

// `t` (moved) as a NumPy array or a torch.Tensor owning its buffer. When
// that array dies its Tensor goes back to a small pool (recycle below).
nb::object wrap(qkv::Tensor&& t, Framework fw);

// A Tensor of this dtype and shape from the pool of results the caller has
// dropped, or an empty Tensor if there is none. attention_into() writes into
// a tensor that already fits, so a loop of same-shaped calls from Python
// (`out = sdpa(q, k, v)` each step) neither allocates nor zero-fills its
// results, as a C++ loop over attention_into() does not: a fresh 2 MiB output
// costs its page faults and a zero fill on every call (measured: 6% of an
// 8 ms prefill, bench/python_overhead.py).
qkv::Tensor reuse(qkv::DType dtype, const qkv::Shape& shape);

}  // namespace qkvpy
