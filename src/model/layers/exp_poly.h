// layers/exp_poly.h: e^x in float32 by a polynomial, for the element-wise
// activations (gelu.cpp, swiglu.cpp): branch-free, so their loops vectorise
// (glibc's expf and exp do not, and cost tens of ns an element).
#pragma once

#include <bit>
#include <cstdint>

namespace qkv::nn::detail {

// e^x for float, branch-free so loops of it vectorise: x = n ln2 + r with
// |r| ≤ ln2/2, e^r by Cephes' expf polynomial (~1 ulp), 2^n built in the
// exponent bits. x is clamped to [-87, 88], where 2^n stays a normal float;
// NaN passes the clamps and comes out NaN.
inline float exp_poly(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // Round x / ln2 to nearest by adding and removing 1.5 · 2^23.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

}  // namespace qkv::nn::detail
