// values.h: element values across dtypes, for the loops that read or write
// any of float32, float64 and bfloat16 through one template.
#pragma once

#include "qkv/tensor.h"

namespace qkv {

// An element as a double: exact for every one of the three dtypes.
inline double as_double(float x) { return x; }
inline double as_double(double x) { return x; }
inline double as_double(bfloat16 x) { return bf16_to_float(x); }

// A double rounded once to T: to float32 or float64, and to bf16 via float32
// (as NumPy and PyTorch convert).
template <class T>
T narrow(double x);
template <>
inline float narrow<float>(double x) { return static_cast<float>(x); }
template <>
inline double narrow<double>(double x) { return x; }
template <>
inline bfloat16 narrow<bfloat16>(double x) { return bf16_from_float(static_cast<float>(x)); }

}  // namespace qkv
