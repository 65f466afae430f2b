// gelu.cpp: GELU, forward and backward, in two forms (qkv/nn.h's Gelu):
// exact, x Φ(x) with Φ the normal CDF (PyTorch's nn.GELU(), nanoGPT's), and
// tanh, GPT-2's approximation. Plain loops with std::erf / std::tanh (ref::,
// float64 and float32) and a float32 path of one polynomial exp per element.
//
// tanh: 0.5 x (1 + tanh u) = x · σ(2u), σ the logistic function, so with
// e = exp(-2u):  gelu(x) = x / (1 + e)  and, with s = 1 / (1 + e),
//   gelu'(x) = s + 2 x s (1 - s) u',  1 - s = e · s,  u' = √(2/π) (1 + 3 · 0.044715 x²).
// One exp per element and no tanh: glibc's tanhf does not vectorise and cost
// 13 ns per element here (5.2 ms for one [768, 512] MLP activation, about a
// third of the whole step's GEMM time); the polynomial exp below runs the same
// activation in 0.21 ms on one core with AVX-512. Error against the float64
// formula: under 2e-6 relative.
//
// exact: with z = |x| / √2, erfc(z) ≈ t (a1 + t (a2 + ... + t a5)) exp(-z²),
// t = 1 / (1 + p z) (Abramowitz & Stegun 7.1.26, absolute error ≤ 1.5e-7; the
// form PyTorch's own vectorised CPU erf uses), so Φ(x) = erfc(z) / 2 for
// x < 0 and 1 - erfc(z) / 2 otherwise, within 7.5e-8 absolute; the same
// exp(-z²) = exp(-x² / 2) gives φ(x) for the backward, Φ + x φ. One exp, no
// erf call, so it vectorises like the tanh form: on one [768, 512] activation,
// one thread, AVX-512, forward 0.24 ms and backward 0.26 ms (tanh: 0.21, 0.29;
// median of 21), error against float64 erf 2.1e-7 of max(1, |gelu|).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "model/layers/exp_poly.h"
#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

// ---- plain loops ---------------------------------------------------------

namespace ref {

template <class T>
void gelu_forward(T* out, const T* inp, int64_t N, Gelu form) {
  if (form == Gelu::exact) {
    for (int64_t i = 0; i < N; ++i) {
      const T x = inp[i];
      out[i] = T(0.5) * x * (T(1) + std::erf(x * static_cast<T>(kSqrtHalf)));
    }
    return;
  }
  for (int64_t i = 0; i < N; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t N, Gelu form, Grad dinp_mode) {
  const bool overwrite = dinp_mode == Grad::overwrite;
  if (form == Gelu::exact) {
    for (int64_t i = 0; i < N; ++i) {
      const T x = inp[i];
      const T cdf = T(0.5) * (T(1) + std::erf(x * static_cast<T>(kSqrtHalf)));
      const T pdf = static_cast<T>(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
      const T g = dout[i] * (cdf + x * pdf);
      dinp[i] = overwrite ? g : dinp[i] + g;
    }
    return;
  }
  for (int64_t i = 0; i < N; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    const T t = std::tanh(u);
    const T du = static_cast<T>(kGeluScale) * (T(1) + T(3) * static_cast<T>(kGeluCubic) * x * x);
    const T g = dout[i] * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
    dinp[i] = overwrite ? g : dinp[i] + g;
  }
}

template void gelu_forward(float*, const float*, int64_t, Gelu);
template void gelu_forward(double*, const double*, int64_t, Gelu);
template void gelu_backward(float*, const float*, const float*, int64_t, Gelu, Grad);
template void gelu_backward(double*, const double*, const double*, int64_t, Gelu, Grad);

}  // namespace ref

// ---- float32: one polynomial exp per element --------------------------------

namespace {

using detail::exp_poly;

constexpr float kScale = static_cast<float>(ref::kGeluScale);
constexpr float kCubic = static_cast<float>(ref::kGeluCubic);

// The element loops, compiled for AVX-512, x86-64-v3 (AVX2 with FMA) and
// baseline x86-64 and picked when the program loads (GCC function
// multi-versioning; one clone per string, so "avx2,fma" would make two, the
// AVX2 one without FMA); the clamps in exp_poly keep the baseline version
// scalar, which only CPUs older than AVX2 run. FMA contraction in the wider
// versions changes the last bits only.
[[gnu::always_inline]] inline void gelu_tanh_loop(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x / (1.0f + exp_poly(-2.0f * kScale * (x + kCubic * x * x * x)));
  }
}

__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void gelu_span(float* out, const float* inp, int64_t n) {
  gelu_tanh_loop(out, inp, n);
}

// The same rounded to bf16 (a bf16 Linear's input).
__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void gelu_span(bfloat16* out, const float* inp, int64_t n) {
  detail::store_rounded(out, n, [inp](float* buf, int64_t i0, int64_t m) {
    gelu_tanh_loop(buf, inp + i0, m);
  });
}

// gelu'(x), tanh form.
inline float gelu_slope(float x) {
  const float e = exp_poly(-2.0f * kScale * (x + kCubic * x * x * x));
  const float s = 1.0f / (1.0f + e);
  const float du = kScale * (1.0f + 3.0f * kCubic * x * x);
  return s + 2.0f * x * (s * (e * s)) * du;
}

// dinp [n] = (or +=) gelu'(inp) · dout with gelu' = Slope: one loop for
// each, so neither carries a per-element branch. Inlined into the
// multi-versioned spans below, which it vectorises with their ISA.
template <float (*Slope)(float)>
__attribute__((always_inline)) inline void backward_loops(float* dinp, const float* inp,
                                                         const float* dout, int64_t n,
                                                         bool overwrite) {
  if (overwrite)
    for (int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * Slope(inp[i]);
  else
    for (int64_t i = 0; i < n; ++i) dinp[i] += dout[i] * Slope(inp[i]);
}

__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void gelu_backward_span(float* dinp, const float* inp, const float* dout, int64_t n,
                        bool overwrite) {
  backward_loops<gelu_slope>(dinp, inp, dout, n, overwrite);
}

constexpr float kSqrtHalf = static_cast<float>(ref::kSqrtHalf);
constexpr float kInvSqrt2Pi = static_cast<float>(ref::kInvSqrt2Pi);

// Φ(x) and e = exp(-x² / 2) by A&S 7.1.26 (see the top of the file).
inline float normal_cdf(float x, float& e) {
  const float z = (x < 0.0f ? -x : x) * kSqrtHalf;
  const float t = 1.0f / (1.0f + 0.3275911f * z);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  e = exp_poly(-z * z);
  const float half_erfc = 0.5f * p * t * e;
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

[[gnu::always_inline]] inline void gelu_exact_loop(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float e;
    const float x = inp[i];
    out[i] = x * normal_cdf(x, e);
  }
}

__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void gelu_exact_span(float* out, const float* inp, int64_t n) {
  gelu_exact_loop(out, inp, n);
}

__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void gelu_exact_span(bfloat16* out, const float* inp, int64_t n) {
  detail::store_rounded(out, n, [inp](float* buf, int64_t i0, int64_t m) {
    gelu_exact_loop(buf, inp + i0, m);
  });
}

// gelu'(x) = Φ(x) + x φ(x), exact form.
inline float gelu_exact_slope(float x) {
  float e;
  const float cdf = normal_cdf(x, e);
  return cdf + x * kInvSqrt2Pi * e;
}

__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void gelu_exact_backward_span(float* dinp, const float* inp, const float* dout, int64_t n,
                              bool overwrite) {
  backward_loops<gelu_exact_slope>(dinp, inp, dout, n, overwrite);
}

// out [N] = gelu(inp [N]), float32 or rounded to bf16
template <class Out>
void fast_forward(Out* out, const float* inp, int64_t N, Gelu form) {
  using Span = void (*)(Out*, const float*, int64_t);
  const Span span =
      form == Gelu::exact ? static_cast<Span>(gelu_exact_span) : static_cast<Span>(gelu_span);
  detail::for_chunks(N, [&](int64_t i, int64_t n) { span(out + i, inp + i, n); });
}

// dinp [N] += gelu'(inp) · dout (= when overwrite)
void fast_backward(float* dinp, const float* inp, const float* dout, int64_t N, Gelu form,
                   bool overwrite) {
  const auto span = form == Gelu::exact ? gelu_exact_backward_span : gelu_backward_span;
  detail::for_chunks(N, [&](int64_t i, int64_t n) { span(dinp + i, inp + i, dout + i, n, overwrite); });
}

}  // namespace

// ---- the layer ---------------------------------------------------------------

template <class T>
void gelu_forward(T* out, const T* inp, int64_t N, Gelu form) {
  if constexpr (std::is_same_v<T, float>)
    fast_forward(out, inp, N, form);
  else
    ref::gelu_forward(out, inp, N, form);
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t N, Gelu form, Grad dinp_mode) {
  if constexpr (std::is_same_v<T, float>)
    fast_backward(dinp, inp, dout, N, form, dinp_mode == Grad::overwrite);
  else
    ref::gelu_backward(dinp, inp, dout, N, form, dinp_mode);
}

void gelu_forward(bfloat16* out, const float* inp, int64_t N, Gelu form) {
  fast_forward(out, inp, N, form);
}

template void gelu_forward(float*, const float*, int64_t, Gelu);
template void gelu_forward(double*, const double*, int64_t, Gelu);
template void gelu_backward(float*, const float*, const float*, int64_t, Gelu, Grad);
template void gelu_backward(double*, const double*, const double*, int64_t, Gelu, Grad);

}  // namespace qkv::nn
