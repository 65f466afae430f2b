// rmsnorm.cpp: RMSNorm over the channels of each row (Llama's norm), forward.
// Each row is one thread's, its sum of squares taken in double in channel
// order: the same bits for any thread count. Inference only (qkv/nn.h).
#include <cmath>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

// out [BT, C] = inp · rstd · weight, rstd [BT] = 1 / sqrt(mean(inp²) + eps).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t BT, int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (BT * C >= detail::kParallelMin)
  for (int64_t r = 0; r < BT; ++r) {
    const T* x = inp + r * C;
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c]) * static_cast<double>(x[c]);
    // As transformers' LlamaRMSNorm: the row normalised first, then scaled.
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c)
      out[r * C + c] = static_cast<T>(static_cast<double>(weight[c]) * static_cast<double>(static_cast<T>(x[c] * s)));
    rstd[r] = static_cast<T>(s);
  }
}

template void rmsnorm_forward(float*, float*, const float*, const float*, int64_t, int64_t, double);
template void rmsnorm_forward(double*, double*, const double*, const double*, int64_t, int64_t, double);

}  // namespace qkv::nn
