// swiglu.cpp: SwiGLU, the gated MLP activation of Llama, forward and
// backward: silu(gate) · up from one [BT, 2F] product holding both.
// Element-wise, so the same bits for any thread count. The reference loops
// compute in double and round once (in double they are the layer itself);
// the float32 forward takes e^-g from the polynomial exp_poly, which
// vectorises (std::exp per element was a tenth of a Llama prefill).
#include <cmath>
#include <type_traits>

#include "model/layers/exp_poly.h"
#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

namespace ref {

// out [BT, F] = silu(inp[:, :F]) · inp[:, F:], inp [BT, 2F].
template <class T>
void swiglu_forward(T* out, const T* inp, int64_t BT, int64_t F) {
  for (int64_t r = 0; r < BT; ++r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    for (int64_t j = 0; j < F; ++j) {
      const double g = static_cast<double>(gate[j]);
      out[r * F + j] = static_cast<T>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[j]));
    }
  }
}

template void swiglu_forward(float*, const float*, int64_t, int64_t);
template void swiglu_forward(double*, const double*, int64_t, int64_t);

}  // namespace ref

namespace {

// One row's n outputs, compiled for AVX-512, x86-64-v3 and baseline x86-64
// (as gelu.cpp's spans; the clamps in exp_poly keep the baseline scalar).
__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void swiglu_span(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = gate[j] / (1.0f + detail::exp_poly(-gate[j])) * up[j];
}

}  // namespace

template <class T>
void swiglu_forward(T* out, const T* inp, int64_t BT, int64_t F) {
  if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static) if (BT * F >= detail::kParallelMin)
    for (int64_t r = 0; r < BT; ++r) swiglu_span(out + r * F, inp + r * 2 * F, inp + r * 2 * F + F, F);
  } else {
#pragma omp parallel for schedule(static) if (BT * F >= detail::kParallelMin)
    for (int64_t r = 0; r < BT; ++r) ref::swiglu_forward(out + r * F, inp + r * 2 * F, 1, F);
  }
}

// With σ = 1 / (1 + e^-g), silu(g) = g σ and silu'(g) = σ (1 + g (1 - σ)):
//   dgate = dout · up · silu'(gate),  dup = dout · silu(gate),
// written (not added) into dinp [BT, 2F]: c_fc's output has no other consumer.
template <class T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t BT, int64_t F) {
#pragma omp parallel for schedule(static) if (BT * F >= detail::kParallelMin)
  for (int64_t r = 0; r < BT; ++r) {
    const T* gate = inp + r * 2 * F;
    const T* up = gate + F;
    T* dgate = dinp + r * 2 * F;
    T* dup = dgate + F;
    for (int64_t j = 0; j < F; ++j) {
      const double g = static_cast<double>(gate[j]), dy = static_cast<double>(dout[r * F + j]);
      const double sig = 1.0 / (1.0 + std::exp(-g));
      dgate[j] = static_cast<T>(dy * static_cast<double>(up[j]) * sig * (1.0 + g * (1.0 - sig)));
      dup[j] = static_cast<T>(dy * g * sig);
    }
  }
}

template void swiglu_forward(float*, const float*, int64_t, int64_t);
template void swiglu_forward(double*, const double*, int64_t, int64_t);
template void swiglu_backward(float*, const float*, const float*, int64_t, int64_t);
template void swiglu_backward(double*, const double*, const double*, int64_t, int64_t);

}  // namespace qkv::nn
