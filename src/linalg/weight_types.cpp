// The table of weight types (qkv/weight_type.h), the unquantized types'
// rows, and the checked entry points.
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "linalg/half.h"
#include "linalg/rows.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/weight_type.h"

namespace qkv {
namespace {

// F32: 4 bytes per weight, little-endian IEEE single precision.
void dequantize_f32(const void* src, float* out, int64_t n) {
  if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f32(const float* x, void* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

// F16: 2 bytes per weight, IEEE half precision (1 sign, 5 exponent, 10
// fraction bits), widened exactly.
void dequantize_f16(const void* src, float* out, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) out[i] = linalg::f16_at(p + 2 * i);
}

// Rounded to nearest, ties to even, as NumPy's astype(float16).
void quantize_f16(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) linalg::put_f16(p + 2 * i, linalg::half_from_float(x[i]));
}

// BF16: 2 bytes per weight, the top half of a float32 (1 sign, 8 exponent,
// 7 fraction bits), widened exactly.
void dequantize_bf16(const void* src, float* out, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(p[2 * i] | p[2 * i + 1] << 8) << 16;
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

// A weight type: its name, block and bytes from ggml's layouts (the io
// layer's one table, which bounds every GGUF tensor), and qkv's functions.
WeightTypeInfo entry(WeightType type, void (*dequantize)(const void*, float*, int64_t),
                     void (*quantize)(const float*, void*, int64_t)) {
  const GgmlTypeLayout& l = *ggml_type_layout(static_cast<uint32_t>(type));
  return {type, l.name, l.block, static_cast<size_t>(l.block_bytes), dequantize, quantize};
}

// In the order of ggml's numbers.
const std::array<WeightTypeInfo, 10>& types() {
  static const std::array<WeightTypeInfo, 10> kTypes = {
      entry(WeightType::f32, dequantize_f32, quantize_f32),
      entry(WeightType::f16, dequantize_f16, quantize_f16),
      entry(WeightType::q4_0, linalg::dequantize_q4_0, linalg::quantize_q4_0),
      entry(WeightType::q5_0, linalg::dequantize_q5_0, linalg::quantize_q5_0),
      entry(WeightType::q5_1, linalg::dequantize_q5_1, linalg::quantize_q5_1),
      entry(WeightType::q8_0, linalg::dequantize_q8_0, linalg::quantize_q8_0),
      entry(WeightType::q4_k, linalg::dequantize_q4_k, linalg::quantize_q4_k),
      entry(WeightType::q5_k, linalg::dequantize_q5_k, linalg::quantize_q5_k),
      entry(WeightType::q6_k, linalg::dequantize_q6_k, linalg::quantize_q6_k),
      entry(WeightType::bf16, dequantize_bf16, nullptr),
  };
  return kTypes;
}

}  // namespace

std::span<const WeightTypeInfo> weight_types() { return types(); }

const WeightTypeInfo* weight_type_from_ggml(uint32_t id) {
  for (const WeightTypeInfo& t : types())
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const WeightTypeInfo& weight_type_info(WeightType type) {
  const WeightTypeInfo* t = weight_type_from_ggml(static_cast<uint32_t>(type));
  if (!t) throw Error("weight type: expected one of qkv's weight types, found ggml type number " +
                      std::to_string(static_cast<uint32_t>(type)));
  return *t;
}

uint64_t weight_bytes(WeightType type, int64_t n) {
  const WeightTypeInfo& t = weight_type_info(type);
  if (n < 0 || n % t.block != 0)
    throw Error(std::string(t.name) + " weights: expected a count that is a multiple of its block of " +
                std::to_string(t.block) + ", found " + std::to_string(n));
  return static_cast<uint64_t>(n / t.block) * t.block_bytes;
}

void dequantize_row(WeightType type, const void* blocks, float* out, int64_t n) {
  weight_bytes(type, n);  // the check of n
  weight_type_info(type).dequantize(blocks, out, n);
}

namespace {
// Whether the f16s at offsets At of each of `blocks` blocks (`bytes` apart)
// are finite: their exponents not all ones. No early exit, so that the loop
// is a plain stream over the blocks (a model's load scans every block).
template <int... At>
bool f16s_finite(const uint8_t* b, int64_t blocks, int64_t bytes) {
  unsigned bad = 0;
  for (int64_t i = 0; i < blocks; ++i, b += bytes) bad |= (((b[At + 1] & 0x7c) == 0x7c) | ...);
  return !bad;
}
}  // namespace

bool all_finite(WeightType type, const void* blocks, int64_t n) {
  const WeightTypeInfo& t = weight_type_info(type);
  weight_bytes(type, n);
  const auto* b = static_cast<const uint8_t*>(blocks);
  const int64_t count = n / t.block, bytes = static_cast<int64_t>(t.block_bytes);
  switch (type) {
    case WeightType::f32: {
      unsigned bad = 0;
      for (int64_t i = 0; i < count; ++i) {
        uint32_t v;
        std::memcpy(&v, b + 4 * i, sizeof v);
        bad |= (v & 0x7f800000u) == 0x7f800000u;  // exponent all ones
      }
      return !bad;
    }
    case WeightType::bf16: {
      unsigned bad = 0;
      for (int64_t i = 0; i < count; ++i) bad |= (b[2 * i + 1] & 0x7f) == 0x7f && (b[2 * i] & 0x80);
      return !bad;
    }
    case WeightType::q6_k: return f16s_finite<208>(b, count, bytes);
    case WeightType::q4_k:
    case WeightType::q5_k:
    case WeightType::q5_1: return f16s_finite<0, 2>(b, count, bytes);
    default: return f16s_finite<0>(b, count, bytes);  // F16, Q8_0, Q4_0, Q5_0: an f16 first
  }
}

void quantize_row(WeightType type, const float* x, void* blocks, int64_t n) {
  const WeightTypeInfo& t = weight_type_info(type);
  if (!t.quantize)
    throw Error(std::string("quantize_row: expected a type qkv can quantize to (F32, F16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), found ") + t.name);
  weight_bytes(type, n);
  t.quantize(x, blocks, n);
}

}  // namespace qkv
