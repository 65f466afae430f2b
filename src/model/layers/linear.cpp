// linear.cpp: y = x · Wᵀ + b and its backward, on the GEMM backend.
#include <algorithm>

#include "model/gemm.h"
#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

using kernels::sgemm;

// out [BT, OC] = inp [BT, C] · weight [OC, C]ᵀ + bias [OC]
void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC) {
  // The bias is written first and the GEMM adds onto it (beta = 1), so out is
  // swept once by us and once by the GEMM, not twice after it.
  if (bias) {
#pragma omp parallel for schedule(static) if (BT * OC >= detail::kParallelMin)
    for (int64_t r = 0; r < BT; ++r) std::copy(bias, bias + OC, out + r * OC);
  }
  sgemm(false, true, BT, OC, C, 1.0f, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

// dinp [BT, C] += dout [BT, OC] · weight [OC, C]
// dweight [OC, C] += dout [BT, OC]ᵀ · inp [BT, C]
// dbias [OC] += Σ_rows dout
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t BT, int64_t C, int64_t OC) {
  sgemm(false, false, BT, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  sgemm(true, false, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (!dbias) return;
  // Column sums: one thread per block of columns, rows in order.
  constexpr int64_t CB = detail::kColBlock;
  const int64_t blocks = (OC + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (BT * OC >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lo = blk * CB, n = std::min(CB, OC - lo);
    float acc[CB] = {};
    for (int64_t r = 0; r < BT; ++r) {
      const float* d = dout + r * OC + lo;
      for (int64_t j = 0; j < n; ++j) acc[j] += d[j];
    }
    for (int64_t j = 0; j < n; ++j) dbias[lo + j] += acc[j];
  }
}

}  // namespace qkv::nn
