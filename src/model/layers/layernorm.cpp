// layernorm.cpp: LayerNorm over the channels of each row, forward and backward.
#include <algorithm>
#include <cmath>

#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

using detail::lane_sum;

// out [BT, C] = (inp - mean) · rstd · weight + bias per row; mean [BT], rstd [BT].
// bias (and dbias) may be null: LayerNorm without bias, as in nanoGPT.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t BT, int64_t C) {
  const float eps = static_cast<float>(ref::kLayerNormEps);
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (BT * C >= detail::kParallelMin)
  for (int64_t r = 0; r < BT; ++r) {
    const float* x = inp + r * C;
    // Two passes (mean, then squared deviations): no cancellation, unlike
    // E[x²] - E[x]², when the mean is large against the spread.
    const float m = lane_sum(C, [&](int64_t c) { return x[c]; }) * inv_c;
    const float v = lane_sum(C, [&](int64_t c) { return (x[c] - m) * (x[c] - m); }) * inv_c;
    const float s = 1.0f / std::sqrt(v + eps);
    float* y = out + r * C;
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : 0.0f);
    mean[r] = m;
    rstd[r] = s;
  }
}

// With n = (x - mean) · rstd and g = dout · weight (per row):
//   dinp    [BT, C] += rstd · (g - mean_c(g) - n · mean_c(g · n))
//   dweight [C]     += Σ_rows dout · n
//   dbias   [C]     += Σ_rows dout
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t BT, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const bool par = BT * C >= detail::kParallelMin;
  // Rows: each is one thread's.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t r = 0; r < BT; ++r) {
    const float* x = inp + r * C;
    const float* dy = dout + r * C;
    const float m = mean[r], s = rstd[r];
    const float g_mean = lane_sum(C, [&](int64_t c) { return dy[c] * weight[c]; }) * inv_c;
    const float gn_mean =
        lane_sum(C, [&](int64_t c) { return dy[c] * weight[c] * ((x[c] - m) * s); }) * inv_c;
    float* dx = dinp + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float n = (x[c] - m) * s;
      dx[c] += s * (dy[c] * weight[c] - g_mean - n * gn_mean);
    }
  }
  // Parameters: sums over rows, one thread per block of channels, rows in order.
  constexpr int64_t CB = detail::kColBlock;
  const int64_t blocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lo = blk * CB, n = std::min(CB, C - lo);
    float dw[CB] = {}, db[CB] = {};
    for (int64_t r = 0; r < BT; ++r) {
      const float* x = inp + r * C + lo;
      const float* dy = dout + r * C + lo;
      const float m = mean[r], s = rstd[r];
      for (int64_t j = 0; j < n; ++j) {
        dw[j] += dy[j] * ((x[j] - m) * s);
        db[j] += dy[j];
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      dweight[lo + j] += dw[j];
      if (dbias) dbias[lo + j] += db[j];
    }
  }
}

}  // namespace qkv::nn
