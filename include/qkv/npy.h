/// @file
/// qkv/npy.h: NumPy .npy files, so arrays move between qkv and Python.
///
/// Read: format versions 1.0, 2.0 and 3.0, C order, and exactly the dtypes
/// '<f4' (float32), '<f8' (float64) and '|b1' (bool). Anything else is a
/// qkv::Error with one line naming the file, what was expected and what was
/// found. A header claiming more data than the file holds is rejected before
/// anything is allocated.
///
/// Write: byte-for-byte what np.save writes for the same array (format 1.0,
/// header padded to 64 bytes; 2.0 only for a header too long for 1.0).
#pragma once

#include <string>

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

/// Reads the .npy file at `path`; errors name the path.
QKV_API Tensor read_npy(const std::string& path);

/// Decodes a whole .npy file held in memory; `name_for_errors` stands in for
/// the path in messages.
QKV_API Tensor parse_npy(const std::string& bytes, const std::string& name_for_errors);

/// The bytes write_npy would put in the file.
QKV_API std::string npy_bytes(const Tensor& t);

/// Atomic: the file at `path` is either the old one or the complete new one.
QKV_API void write_npy(const std::string& path, const Tensor& t);

}  // namespace qkv
