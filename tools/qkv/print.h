// print.h: NumPy-style printing, so the CLI's numbers read exactly like the
// lessons' (np.set_printoptions(precision=P, suppress=True)).
#pragma once

#include <string>

#include "qkv/tensor.h"

namespace qkv::cli {

// A float tensor of rank 1 or 2 formatted the way NumPy prints it with
// precision P, suppress=True and the default 'maxprec' float mode: every
// element rounded to P decimals, trailing zeros trimmed to the longest
// fraction needed ("1.  " beside "0.25"), decimal points aligned,
// "-inf"/"nan" right-aligned, and rows wider than NumPy's 75 characters
// wrapped where NumPy wraps them. (NumPy switches to scientific notation for
// values >= 1e8 even with suppress=True; nothing qkv prints gets near that.)
std::string numpy_str(const Tensor& t, int precision = 4);

// A 1-d or 2-d array of integers (or bools as 0/1), as NumPy prints an int
// array: "[[1 0]\n [1 1]]", every element right-aligned to the widest.
std::string numpy_int_str(const Tensor& t);

// A Python tuple for a shape: "(4, 3)", "(5,)", "()".
std::string tuple_str(const Shape& shape);

// Python's repr of round(x, 4): "1.7321", "0.5", "2.0".
std::string round4_str(double x);

// Python's f"{x:W.Pf}": fixed point, P decimals, right-aligned in W columns.
std::string fixed_str(double x, int decimals, int width = 0);

}  // namespace qkv::cli
