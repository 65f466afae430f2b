// The table of weight types (qkv/weight_type.h), the unquantized types'
// rows, and the checked entry points.
#include <cstring>
#include <string>

#include "linalg/half.h"
#include "linalg/rows.h"
#include "qkv/error.h"
#include "qkv/weight_type.h"

namespace qkv {
namespace {

// F32: 4 bytes per weight, little-endian IEEE single precision.
void dequantize_f32(const void* src, float* out, int64_t n) {
  if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
}

// F16: 2 bytes per weight, IEEE half precision (1 sign, 5 exponent, 10
// fraction bits), widened exactly.
void dequantize_f16(const void* src, float* out, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) out[i] = linalg::f16_at(p + 2 * i);
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

// In the order of ggml's numbers.
constexpr WeightTypeInfo kTypes[] = {
    {WeightType::f32, "F32", 1, 4, dequantize_f32, nullptr},
    {WeightType::f16, "F16", 1, 2, dequantize_f16, nullptr},
    {WeightType::q4_0, "Q4_0", 32, 18, linalg::dequantize_q4_0, linalg::quantize_q4_0},
    {WeightType::q8_0, "Q8_0", 32, 34, linalg::dequantize_q8_0, linalg::quantize_q8_0},
    {WeightType::q4_k, "Q4_K", 256, 144, linalg::dequantize_q4_k, nullptr},
    {WeightType::q5_k, "Q5_K", 256, 176, linalg::dequantize_q5_k, nullptr},
    {WeightType::q6_k, "Q6_K", 256, 210, linalg::dequantize_q6_k, nullptr},
    {WeightType::bf16, "BF16", 1, 2, dequantize_bf16, nullptr},
};

}  // namespace

std::span<const WeightTypeInfo> weight_types() { return kTypes; }

const WeightTypeInfo* weight_type_from_ggml(uint32_t id) {
  for (const WeightTypeInfo& t : kTypes)
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

void quantize_row(WeightType type, const float* x, void* blocks, int64_t n) {
  const WeightTypeInfo& t = weight_type_info(type);
  if (!t.quantize)
    throw Error(std::string("quantize_row: expected a type qkv can quantize to (Q8_0, Q4_0), found ") + t.name);
  weight_bytes(type, n);
  t.quantize(x, blocks, n);
}

}  // namespace qkv
