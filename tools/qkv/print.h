// print.h: NumPy-style printing, so the CLI's numbers read exactly like the
// lesson's (np.set_printoptions(precision=4, suppress=True)).
#pragma once

#include <string>

#include "qkv/tensor.h"

namespace qkv::cli {

// A float tensor of rank 1 or 2 formatted the way NumPy prints it with
// precision 4, suppress=True and the default 'maxprec' float mode: every
// element rounded to 4 decimals, trailing zeros trimmed to the longest
// fraction needed, decimal points aligned, "-inf"/"nan" right-aligned.
std::string numpy_str(const Tensor& t);

// A 2-d array of small integers (or bools as 0/1), as NumPy prints an int
// array whose values are all one digit wide: "[[1 0]\n [1 1]]".
std::string numpy_int_str(const Tensor& t);

// A Python tuple for a shape: "(4, 3)", "(5,)", "()".
std::string tuple_str(const Shape& shape);

// Python's repr of round(x, 4): "1.7321", "0.5", "2.0".
std::string round4_str(double x);

}  // namespace qkv::cli
