// swiglu.cpp: SwiGLU, the gated MLP activation of Llama, forward:
// silu(gate) · up from one [BT, 2F] product holding both. Element-wise, in
// double, rounded once: the same bits for any thread count. Inference only
// (qkv/nn.h).
#include <cmath>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

// out [BT, F] = silu(inp[:, :F]) · inp[:, F:], inp [BT, 2F].
template <class T>
void swiglu_forward(T* out, const T* inp, int64_t BT, int64_t F) {
#pragma omp parallel for schedule(static) if (BT * F >= detail::kParallelMin)
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

}  // namespace qkv::nn
