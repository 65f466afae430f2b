/// @file
/// qkv/safetensors.h: safetensors files, so weights move between qkv and
/// PyTorch / Hugging Face (safetensors.torch.load_file reads what qkv writes,
/// and qkv reads what save_file writes, for the dtypes below).
///
/// Layout (https://github.com/huggingface/safetensors):
///   8 bytes   N, the header length, unsigned little-endian
///   N bytes   a JSON object, padded with spaces:
///               {"__metadata__": {"key": "value", ...},
///                "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
///   the rest  the tensors' bytes, little-endian, C order; data_offsets count
///             from the first byte after the header
///
/// qkv reads and writes exactly the dtypes F32 (float32), F64 (float64) and
/// BOOL (one byte, 0 or 1). Reading is strict and bounded: the header length
/// is checked against the file (and a 100 MB cap, as the reference reader has)
/// before anything is allocated, every tensor's offsets must be in range and
/// match its dtype and shape, the tensors must tile the data exactly (no
/// overlaps, gaps or trailing bytes), and names may not repeat. Every failure
/// is a qkv::Error with one line naming the file, what was expected and what
/// was found.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

/// Writes `tensors` in the order given, their data contiguous, with the
/// optional string metadata under "__metadata__". The header is compact JSON
/// (keys "dtype", "shape", "data_offsets" in that order, as the reference
/// writer has them) padded with spaces to a multiple of 8 bytes. Names must be
/// distinct, valid UTF-8 and not "__metadata__". Atomic: the file at `path` is
/// either the old one or the complete new one.
QKV_API void write_safetensors(const std::string& path,
                               const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

/// All the tensors in the file, by name.
QKV_API std::map<std::string, Tensor> read_safetensors(const std::string& path);

/// The "__metadata__" map (empty when absent). Validates the whole header
/// against the file's size as read_safetensors does, without reading the data.
QKV_API std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

/// A checkpoint's tensors as stored (the weights of a Hugging Face model):
/// any safetensors dtype ("F32", "F16", "BF16", "I64", ...) is listed, and
/// the header is checked as strictly as read_safetensors checks it.
struct SafetensorsEntry {
  std::string name;   ///< the tensor's name in the file
  std::string dtype;  ///< the file's name for its dtype, e.g. "BF16"
  Shape shape;        ///< its shape
};
/// Every tensor of the file at `path`, as its header lists them.
QKV_API std::vector<SafetensorsEntry> safetensors_entries(const std::string& path);

/// Reads a checkpoint's tensors as float32 without holding the file in
/// memory: for each tensor, dst_for(entry) says where its numel floats go (C
/// order), or null to skip it. F32 is read in place; F16 and BF16 are
/// widened exactly. Another dtype asked for is a qkv::Error naming the tensor.
QKV_API void read_safetensors_as_f32(const std::string& path,
                                     const std::function<float*(const SafetensorsEntry&)>& dst_for);

/// Where read_safetensors_into puts one tensor's numel values (C order):
/// float32 (from F32, F16 or BF16, widened exactly), or bf16 as the file
/// stores it (a BF16 tensor only); both null skips the tensor.
struct SafetensorsTarget {
  float* f32 = nullptr;       ///< float32 here
  bfloat16* bf16 = nullptr;   ///< or bf16 here
};
/// read_safetensors_as_f32 with a choice of float32 or bf16 per tensor; a
/// bf16 target for a tensor that is not BF16 is a qkv::Error naming it.
QKV_API void read_safetensors_into(
    const std::string& path, const std::function<SafetensorsTarget(const SafetensorsEntry&)>& target_for);

/// IEEE half precision (safetensors' F16) bits to float32, exactly.
QKV_API float float_from_half(uint16_t bits);

/// In-memory forms of the above (for tests and fuzzing): the bytes
/// write_safetensors would put in the file, and a decoder of a whole file held
/// in memory; `name_for_errors` stands in for the path in messages.
QKV_API std::string safetensors_bytes(
    const std::vector<std::pair<std::string, const Tensor*>>& tensors,
    const std::map<std::string, std::string>& metadata = {});
/// Decodes a whole .safetensors file held in memory (see safetensors_bytes).
QKV_API std::map<std::string, Tensor> parse_safetensors(const std::string& bytes,
                                                        const std::string& name_for_errors);

}  // namespace qkv
