// linear.cpp: y = x · W + b and its backward. Plain loops (float64: the
// lessons and the gradient checks) and the GEMM backend (float32: the GPT;
// sgemm, or gemm_bf16 for mixed precision).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "linalg/gemm.h"
#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/error.h"
#include "qkv/nn.h"

namespace qkv::nn {

// ---- plain loops ---------------------------------------------------------

namespace ref {

// out [BT, OC] = inp [BT, C] · W + bias [OC]
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t BT, int64_t C,
                    int64_t OC, WeightLayout layout) {
  // W(c, o): the weight of input c in output o, in either storage order.
  const bool in_out = layout == WeightLayout::in_out;
  std::vector<T> acc(static_cast<size_t>(OC));
  for (int64_t r = 0; r < BT; ++r) {
    std::fill(acc.begin(), acc.end(), T(0));
    // c outermost walks an [in, out] weight row by row; each acc[o] still
    // sums its products in order c = 0..C-1.
    for (int64_t c = 0; c < C; ++c) {
      const T x = inp[r * C + c];
      if (in_out) {
        const T* w = weight + c * OC;
        for (int64_t o = 0; o < OC; ++o) acc[o] += x * w[o];
      } else {
        for (int64_t o = 0; o < OC; ++o) acc[o] += x * weight[o * C + c];
      }
    }
    for (int64_t o = 0; o < OC; ++o) out[r * OC + o] = bias ? acc[o] + bias[o] : acc[o];
  }
}

// dinp [BT, C] += dout · W (= under dinp_mode overwrite);  dweight [OC, C] += doutᵀ · inp and
// dbias [OC] += Σ_rows dout (= under param_mode overwrite)
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t BT, int64_t C, int64_t OC, Grad dinp_mode, Grad param_mode) {
  const bool set_dinp = dinp_mode == Grad::overwrite, set_params = param_mode == Grad::overwrite;
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t o = 0; o < OC; ++o) acc += dout[r * OC + o] * weight[o * C + c];
      dinp[r * C + c] = set_dinp ? acc : dinp[r * C + c] + acc;
    }
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t r = 0; r < BT; ++r) acc += dout[r * OC + o] * inp[r * C + c];
      dweight[o * C + c] = set_params ? acc : dweight[o * C + c] + acc;
    }
  if (dbias)
    for (int64_t o = 0; o < OC; ++o) {
      T acc = 0;
      for (int64_t r = 0; r < BT; ++r) acc += dout[r * OC + o];
      dbias[o] = set_params ? acc : dbias[o] + acc;
    }
}

template void linear_forward(float*, const float*, const float*, const float*, int64_t, int64_t,
                             int64_t, WeightLayout);
template void linear_forward(double*, const double*, const double*, const double*, int64_t,
                             int64_t, int64_t, WeightLayout);
template void linear_backward(float*, float*, float*, const float*, const float*, const float*,
                              int64_t, int64_t, int64_t, Grad, Grad);
template void linear_backward(double*, double*, double*, const double*, const double*,
                              const double*, int64_t, int64_t, int64_t, Grad, Grad);

}  // namespace ref

// ---- float32: the GEMM backend ---------------------------------------------

namespace {

// The GEMM of a Matmul choice: sgemm or gemm_bf16 (same arguments).
using Gemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t);
Gemm gemm_for(Matmul m) {
  return m == Matmul::bf16 ? static_cast<Gemm>(linalg::gemm_bf16) : linalg::sgemm;
}

// out [BT, OC] = inp [BT, C] · W + bias [OC]; inp float32 or (Matmul::bf16
// only) bfloat16. The bias is the GEMM's own (added as each sum is stored
// on the few-row kernels; written first, with beta = 1, on the others).
template <class TI>
void fast_forward(float* out, const TI* inp, const float* weight, const float* bias,
                  int64_t BT, int64_t C, int64_t OC, WeightLayout layout, Matmul matmul) {
  const bool out_in = layout == WeightLayout::out_in;
  const int64_t ldw = out_in ? C : OC;
  if (matmul == Matmul::bf16) {
    linalg::gemm_bf16_bias(false, out_in, BT, OC, C, 1.0f, inp, C, weight, ldw, 0.0f, bias, out, OC);
    return;
  }
  if constexpr (std::is_same_v<TI, float>)
    linalg::sgemm_bias(false, out_in, BT, OC, C, 1.0f, inp, C, weight, ldw, 0.0f, bias, out, OC);
}

// dinp [BT, C] += dout [BT, OC] · weight [OC, C]
// dweight [OC, C] += dout [BT, OC]ᵀ · inp [BT, C]
// dbias [OC] += Σ_rows dout
// (= under Grad::overwrite: beta = 0 in the GEMMs, which never reads C)
template <class TI>
void fast_backward(float* dinp, float* dweight, float* dbias, const float* dout, const TI* inp,
                   const float* weight, int64_t BT, int64_t C, int64_t OC, Matmul matmul,
                   Grad dinp_mode, Grad param_mode) {
  const auto gemm = gemm_for(matmul);
  const bool set_params = param_mode == Grad::overwrite;
  gemm(false, false, BT, C, OC, 1.0f, dout, OC, weight, C, dinp_mode == Grad::overwrite ? 0.0f : 1.0f,
       dinp, C);
  if constexpr (std::is_same_v<TI, float>)
    gemm(true, false, OC, C, BT, 1.0f, dout, OC, inp, C, set_params ? 0.0f : 1.0f, dweight, C);
  else  // a bfloat16 input: Matmul::bf16
    linalg::gemm_bf16(true, false, OC, C, BT, 1.0f, dout, OC, inp, C, set_params ? 0.0f : 1.0f,
                       dweight, C);
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
    for (int64_t j = 0; j < n; ++j) dbias[lo + j] = set_params ? acc[j] : dbias[lo + j] + acc[j];
  }
}

}  // namespace

// ---- the layer: float32 on the GEMM backend, float64 in plain loops --------

namespace {

void refuse_bf16_in_double(Matmul matmul) {
  if (matmul == Matmul::bf16)
    throw Error("linear: Matmul::bf16 is for float32 layers; float64 runs plain float64 loops");
}

}  // namespace

template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t BT, int64_t C,
                    int64_t OC, WeightLayout layout, Matmul matmul) {
  if constexpr (std::is_same_v<T, float>) {
    fast_forward(out, inp, weight, bias, BT, C, OC, layout, matmul);
  } else {
    refuse_bf16_in_double(matmul);
    ref::linear_forward(out, inp, weight, bias, BT, C, OC, layout);
  }
}

template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t BT, int64_t C, int64_t OC, Matmul matmul, Grad dinp_mode,
                     Grad param_mode) {
  if constexpr (std::is_same_v<T, float>) {
    fast_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, matmul, dinp_mode, param_mode);
  } else {
    refuse_bf16_in_double(matmul);
    ref::linear_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, dinp_mode, param_mode);
  }
}

void linear_forward(float* out, const bfloat16* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC, WeightLayout layout) {
  fast_forward(out, inp, weight, bias, BT, C, OC, layout, Matmul::bf16);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const bfloat16* inp, const float* weight, int64_t BT, int64_t C, int64_t OC,
                     Grad dinp_mode, Grad param_mode) {
  fast_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, Matmul::bf16, dinp_mode,
                param_mode);
}

template void linear_forward(float*, const float*, const float*, const float*, int64_t, int64_t,
                             int64_t, WeightLayout, Matmul);
template void linear_forward(double*, const double*, const double*, const double*, int64_t,
                             int64_t, int64_t, WeightLayout, Matmul);
template void linear_backward(float*, float*, float*, const float*, const float*, const float*,
                              int64_t, int64_t, int64_t, Matmul, Grad, Grad);
template void linear_backward(double*, double*, double*, const double*, const double*,
                              const double*, int64_t, int64_t, int64_t, Matmul, Grad, Grad);

}  // namespace qkv::nn
