/// @file
/// qkv/weight_type.h: the types a weight can be stored in, in one table:
/// float32, float16, bfloat16, and ggml's block-quantized Q8_0, Q4_0, Q5_0,
/// Q5_1, Q4_K, Q5_K and Q6_K (the types of GGUF files).
///
/// A quantized type stores a row of weights in blocks: `block` weights in
/// `block_bytes` bytes, small integers and the scale (and offset) that turn
/// them back into numbers. Each row of the table gives the layout and the
/// plain reference dequantizer, written from the format's definition and
/// equal bit for bit to the gguf Python package's (tests/numpy/test_gguf.py);
/// Every type but BF16 has ggml's reference quantizer too: the same bits as
/// quantize_row_q8_0_ref, ..._q4_0_ref, ..._q5_0_ref, ..._q5_1_ref,
/// ..._q4_K_ref, ..._q5_K_ref and
/// ..._q6_K_ref (the blocks llama-quantize writes without an importance
/// matrix; tests/numpy/test_quantize.py). The byte layout of each
/// block is drawn beside its code in src/linalg/.
///
///   type  block  bytes  bits/weight
///   F32       1      4  32
///   F16       1      2  16
///   BF16      1      2  16
///   Q8_0     32     34   8.5
///   Q4_0     32     18   4.5
///   Q5_0     32     22   5.5
///   Q5_1     32     24   6
///   Q4_K    256    144   4.5
///   Q5_K    256    176   5.5
///   Q6_K    256    210   6.5625
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "qkv/export.h"

namespace qkv {

/// A weight's storage type. The numbers are ggml's, as a GGUF tensor's type
/// id (qkv/gguf.h) gives them.
enum class WeightType : uint32_t {
  f32 = 0,    ///< F32: float32
  f16 = 1,    ///< F16: IEEE half precision
  q4_0 = 2,   ///< Q4_0: blocks of 32 4-bit weights and an f16 scale
  q5_0 = 6,   ///< Q5_0: blocks of 32 5-bit weights and an f16 scale
  q5_1 = 7,   ///< Q5_1: Q5_0 with an f16 offset (the block's minimum)
  q8_0 = 8,   ///< Q8_0: blocks of 32 int8 weights and an f16 scale
  q4_k = 12,  ///< Q4_K: 256 4-bit weights, 8 sub-blocks with 6-bit scales and mins
  q5_k = 13,  ///< Q5_K: Q4_K with a fifth bit per weight
  q6_k = 14,  ///< Q6_K: 256 6-bit weights, 16 sub-blocks with int8 scales
  bf16 = 30   ///< BF16: bfloat16
};

/// One row of the table.
struct WeightTypeInfo {
  WeightType type;     ///< the type
  const char* name;    ///< ggml's name: "F32", "Q4_K", ...
  int64_t block;       ///< weights per block
  size_t block_bytes;  ///< bytes per block
  /// The reference dequantizer: the n weights (a multiple of `block`) held
  /// in n / block blocks at `blocks` (any alignment) to float32 at `out`.
  void (*dequantize)(const void* blocks, float* out, int64_t n);
  /// The reference quantizer (n float32 weights to n / block blocks), or
  /// null where qkv has none (BF16).
  void (*quantize)(const float* x, void* blocks, int64_t n);
};

/// Every weight type, in the order of their ggml numbers.
QKV_API std::span<const WeightTypeInfo> weight_types();
/// The row of `type`.
QKV_API const WeightTypeInfo& weight_type_info(WeightType type);
/// The row of ggml type number `id`, or null when qkv has no such weight type.
QKV_API const WeightTypeInfo* weight_type_from_ggml(uint32_t id);

/// Bytes of n weights stored as `type`; n must be a non-negative multiple of
/// its block (else a qkv::Error naming the type, the block and n).
QKV_API uint64_t weight_bytes(WeightType type, int64_t n);
/// The n weights at `blocks` (weight_bytes(type, n) bytes) as float32 in
/// out[0..n): the table's reference dequantizer, after the check of n.
QKV_API void dequantize_row(WeightType type, const void* blocks, float* out, int64_t n);
/// Whether every one of the n weights at `blocks` is finite: for a block
/// type, every scale (and min) of its blocks, the integers being bounded;
/// n checked as in weight_bytes.
QKV_API bool all_finite(WeightType type, const void* blocks, int64_t n);
/// n float32 weights to weight_bytes(type, n) bytes at `blocks`: the
/// reference quantizer; a type without one is a qkv::Error naming it.
QKV_API void quantize_row(WeightType type, const float* x, void* blocks, int64_t n);

}  // namespace qkv
