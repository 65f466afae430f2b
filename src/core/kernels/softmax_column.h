// softmax_column.h: e^x and one column vector of the online softmax step,
// on a vector type V (flash_simd.inc's contract), shared by the float32
// softmax of each instruction set (flash_simd.inc) and the bf16 prefill's
// softmax into pairs (avx512bf16/softmax_avx512bf16.cpp), so both give the
// same weights and (m, l) bit for bit. In an anonymous namespace: each file
// compiles its own copy with its own -m flags, never merged by the linker.
#pragma once

#include <cstdint>

#include "core/kernels/flash_kernels.h"

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

// Columns [c, c + V::W) of FlashKernels::softmax's step over St [nj][kBR]:
// m' = max(m, max_j s), the weights exp(s - m') handed to emit(t, a, b,
// has_b) two keys at a time (keys 2t and 2t + 1; b = 0 and has_b false when
// 2t + 1 = nj), alpha = exp(m - m') and l' = alpha l + the weights' sum in
// key order. emit may overwrite St's rows 2t and 2t + 1: they are read first.
template <class V, class Emit>
inline void softmax_column(const float* St, int64_t nj, int c, float* m, float* l, float* alpha,
                           Emit emit) {
  using reg = typename V::reg;
  const reg m_old = V::load(m + c);
  // The max in four independent chains: one chain of nj dependent max ops
  // (latency-bound, ~2 cycles each) held up every column. max is exact, so
  // the order changes nothing for finite scores.
  reg mx0 = m_old, mx1 = m_old, mx2 = m_old, mx3 = m_old;
  int64_t j = 0;
  for (; j + 4 <= nj; j += 4) {
    mx0 = V::max(mx0, V::load(St + j * kBR + c));
    mx1 = V::max(mx1, V::load(St + (j + 1) * kBR + c));
    mx2 = V::max(mx2, V::load(St + (j + 2) * kBR + c));
    mx3 = V::max(mx3, V::load(St + (j + 3) * kBR + c));
  }
  for (; j < nj; ++j) mx0 = V::max(mx0, V::load(St + j * kBR + c));
  const reg mx = V::max(V::max(mx0, mx1), V::max(mx2, mx3));
  // A column with no finite score yet subtracts 0, so exp(-inf) = 0 and
  // never exp(-inf - -inf) = NaN.
  const reg base = V::zero_if_neg_inf(mx);
  reg sum = V::zero();
  const int64_t pairs = (nj + 1) / 2;
  for (int64_t t = 0; t < pairs; ++t) {
    const reg a = vexp<V>(V::sub(V::load(St + 2 * t * kBR + c), base));
    sum = V::add(sum, a);
    const bool has_b = 2 * t + 1 < nj;
    reg b = V::zero();
    if (has_b) {
      b = vexp<V>(V::sub(V::load(St + (2 * t + 1) * kBR + c), base));
      sum = V::add(sum, b);
    }
    emit(t, a, b, has_b);
  }
  const reg a = vexp<V>(V::sub(m_old, base));
  V::store(alpha + c, a);
  V::store(l + c, V::fmadd(a, V::load(l + c), sum));
  V::store(m + c, mx);
}

}  // namespace
}  // namespace qkv::kernels
