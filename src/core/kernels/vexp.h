// vexp.h: e^x on a vector type V (flash_simd.inc's contract: set1, max, mul,
// fmadd, add, round, ldexp_or_zero), for the float32 micro-kernels of each
// instruction set and the bf16 softmax (avx512bf16/softmax_avx512bf16.cpp),
// so both give the same weights. In an anonymous namespace: each file
// compiles its own copy with its own -m flags, never merged by the linker.
#pragma once

namespace qkv::kernels {
namespace {

// e^x, |rel. error| < 2 ulp for x in [-87, 88]; exactly 0 for x < -87.3
// (including -inf), so blocked scores give weight 0, not a denormal, and 0
// for NaN (the softmax only ever asks for x <= 0).
// Cody-Waite range reduction x = n ln2 + r, then a degree-5 minimax
// polynomial for e^r on |r| <= ln2/2 (Cephes' expf coefficients).
template <class V>
inline typename V::reg vexp(typename V::reg x) {
  using reg = typename V::reg;
  const reg xc = V::max(x, V::set1(-88.0f));
  const reg n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  reg r = V::fmadd(n, V::set1(-0.693359375f), xc);
  r = V::fmadd(n, V::set1(2.12194440e-4f), r);
  reg p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::ldexp_or_zero(p, n, x, -87.3f);
}

}  // namespace
}  // namespace qkv::kernels
