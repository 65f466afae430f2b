// The Python dict literal at the start of a .npy file, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
#pragma once

#include <string>
#include <string_view>

#include "qkv/tensor.h"

namespace qkv {

struct NpyHeader {
  std::string descr;  // NumPy's dtype.str, e.g. '<f4'
  bool fortran_order = false;
  Shape shape;        // dims are >= 0; the product is not checked here
};

// Parses the dict by hand: the three keys in any order, any whitespace, an
// optional trailing comma, 'single' or "double" quotes, and Python 2's 3L
// integers. Anything else (a missing, repeated or unknown key, a value of the
// wrong kind, a negative dim) throws qkv::Error naming `name` and quoting the
// header.
NpyHeader parse_npy_header(std::string_view text, const std::string& name);

// Bytes shown in a one-line message: "\"...\"" with controls and bytes >= 0x80
// escaped as \xNN, cut after `limit` characters.
std::string quoted(std::string_view s, size_t limit);

}  // namespace qkv
