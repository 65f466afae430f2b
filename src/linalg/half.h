// linalg/half.h: the IEEE half-precision (f16) scales inside quantized
// blocks, read and written at any byte address, little-endian.
#pragma once

#include <bit>
#include <cstdint>

#include "qkv/safetensors.h"  // float_from_half

namespace qkv::linalg {

// f16 bits h as float32, exactly: a normal half rebiased in place (the
// common case, inline: a quantized block's scale is read per block), the
// rest (zero, subnormals, inf, NaN) by the io layer's full conversion.
inline float half_to_float(uint16_t h) {
  const uint32_t e = (h >> 10) & 31u;
  if (e == 0 || e == 31) return float_from_half(h);
  return std::bit_cast<float>((h & 0x8000u) << 16 | (e + 112) << 23 | (h & 1023u) << 13);
}

// The f16 at p (2 bytes) as float32, exactly.
inline float f16_at(const uint8_t* p) { return half_to_float(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// float32 to f16 bits, rounded to nearest, ties to even (as NumPy's
// astype(float16) and ggml's GGML_FP32_TO_FP16 round): past the largest
// half (65504) to infinity, below 2^-14 to a subnormal or zero. NaN becomes
// the quiet NaN 0x7e00 with its sign, as ggml's software conversion does.
inline uint16_t half_from_float(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to inf
  if (ax < 0x38800000u) {
    // Below 2^-14: the half is m * 2^-24, m = 1.mant * 2^(exp - 126),
    // rounded to nearest even (m = 1024 is the smallest normal's bits).
    const uint32_t exp = ax >> 23;
    if (exp < 102) return sign;  // under 2^-25: rounds to zero
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - exp;
    uint32_t m = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (m & 1))) ++m;
    return sign | static_cast<uint16_t>(m);
  }
  // Normal: the exponent rebiased (127 -> 15), the 23-bit fraction rounded
  // to 10 bits; a carry out of the fraction moves up the exponent, as it should.
  const uint32_t r = ax - (112u << 23);
  return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1)) >> 13);
}

// f16 bits written little-endian at p.
inline void put_f16(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

}  // namespace qkv::linalg
