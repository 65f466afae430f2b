// rmsnorm.cpp: RMSNorm over the channels of each row (Llama's norm), forward
// and backward. Each row is one thread's, its sums taken in double in
// channel order (the weight's gradient: each channel one thread's, summed in
// row order): the same bits for any thread count. One implementation for
// float and double: in double it is its own reference.
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

// With n = inp · rstd and dn = dout · weight: rstd depends on the whole row,
// ∂rstd/∂x_j = -rstd³ x_j / C, so
//   dinp += rstd · (dn - n · mean_c(dn · n)),  dweight += Σ_rows dout · n.
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd,
                      int64_t BT, int64_t C) {
  const bool threaded = BT * C >= detail::kParallelMin;
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t r = 0; r < BT; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    const double s = static_cast<double>(rstd[r]);
    double dn_n = 0.0;
    for (int64_t c = 0; c < C; ++c)
      dn_n += static_cast<double>(dy[c]) * static_cast<double>(weight[c]) * static_cast<double>(x[c]) * s;
    dn_n /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      const double n = static_cast<double>(x[c]) * s;
      const double dn = static_cast<double>(dy[c]) * static_cast<double>(weight[c]);
      dinp[r * C + c] += static_cast<T>(s * (dn - n * dn_n));
    }
  }
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0.0;
    for (int64_t r = 0; r < BT; ++r)
      sum += static_cast<double>(dout[r * C + c]) * static_cast<double>(inp[r * C + c]) *
             static_cast<double>(rstd[r]);
    dweight[c] += static_cast<T>(sum);
  }
}

template void rmsnorm_forward(float*, float*, const float*, const float*, int64_t, int64_t, double);
template void rmsnorm_forward(double*, double*, const double*, const double*, int64_t, int64_t, double);
template void rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*,
                               int64_t, int64_t);
template void rmsnorm_backward(double*, double*, const double*, const double*, const double*,
                               const double*, int64_t, int64_t);

}  // namespace qkv::nn
