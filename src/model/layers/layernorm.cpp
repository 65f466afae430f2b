// layernorm.cpp: LayerNorm over the channels of each row, forward and backward.
// Plain loops (float64) and a threaded, vectorised float32 path.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

// ---- plain loops ---------------------------------------------------------

namespace ref {

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t BT, int64_t C, double eps) {
  for (int64_t r = 0; r < BT; ++r) {
    const T* x = inp + r * C;
    T m = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<T>(C);
    T v = 0;
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= static_cast<T>(C);
    const T s = T(1) / std::sqrt(v + static_cast<T>(eps));
    for (int64_t c = 0; c < C; ++c)
      out[r * C + c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : T(0));
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int64_t BT, int64_t C) {
  for (int64_t r = 0; r < BT; ++r) {
    const T* x = inp + r * C;
    const T* dy = dout + r * C;
    T g_mean = 0, gn_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T n = (x[c] - mean[r]) * rstd[r];
      const T g = dy[c] * weight[c];
      g_mean += g;
      gn_mean += g * n;
    }
    g_mean /= static_cast<T>(C);
    gn_mean /= static_cast<T>(C);
    for (int64_t c = 0; c < C; ++c) {
      const T n = (x[c] - mean[r]) * rstd[r];
      const T g = dy[c] * weight[c];
      dinp[r * C + c] += rstd[r] * (g - g_mean - n * gn_mean);
      dweight[c] += dy[c] * n;
      if (dbias) dbias[c] += dy[c];
    }
  }
}

template void layernorm_forward(float*, float*, float*, const float*, const float*, const float*,
                                int64_t, int64_t, double);
template void layernorm_forward(double*, double*, double*, const double*, const double*,
                                const double*, int64_t, int64_t, double);
template void layernorm_backward(float*, float*, float*, const float*, const float*, const float*,
                                 const float*, const float*, int64_t, int64_t);
template void layernorm_backward(double*, double*, double*, const double*, const double*,
                                 const double*, const double*, const double*, int64_t, int64_t);

}  // namespace ref

// ---- float32: rows on threads, lane sums ------------------------------------

namespace {

using detail::lane_sum;

// The per-row and per-column-block loops below are compiled for x86-64-v3
// (AVX2: lane_sum's eight partial sums fill one ymm) and for baseline
// x86-64 (two xmm), picked when the program loads. This file is built with
// -ffp-contract=off (CMakeLists.txt): no FMA contraction in either, so both
// give the same bits.
#define QKV_LN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))

// m and s of one row x [C].
QKV_LN_CLONES
void row_stats(const float* x, int64_t C, float eps, float* mean, float* rstd) {
  const float inv_c = 1.0f / static_cast<float>(C);
  // Two passes (mean, then squared deviations): no cancellation, unlike
  // E[x²] - E[x]², when the mean is large against the spread.
  const float m = lane_sum(C, [&](int64_t c) { return x[c]; }) * inv_c;
  const float v = lane_sum(C, [&](int64_t c) { return (x[c] - m) * (x[c] - m); }) * inv_c;
  *mean = m;
  *rstd = 1.0f / std::sqrt(v + eps);
}

// y [C] = (x - m) · s · weight + bias, float32 or rounded to bf16.
[[gnu::always_inline]] inline void normalize(float* y, const float* x, float m, float s,
                                             const float* weight, const float* bias, int64_t C) {
  for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + (bias ? bias[c] : 0.0f);
}
QKV_LN_CLONES
void normalize_row(float* y, const float* x, float m, float s, const float* weight,
                   const float* bias, int64_t C) {
  normalize(y, x, m, s, weight, bias, C);
}
QKV_LN_CLONES
void normalize_row(bfloat16* y, const float* x, float m, float s, const float* weight,
                   const float* bias, int64_t C) {
  detail::store_rounded(y, C, [&](float* buf, int64_t c0, int64_t n) {
    normalize(buf, x + c0, m, s, weight + c0, bias ? bias + c0 : nullptr, n);
  });
}

template <class Out>
void fast_forward(Out* out, float* mean, float* rstd, const float* inp, const float* weight,
                  const float* bias, int64_t BT, int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (BT * C >= detail::kParallelMin)
  for (int64_t r = 0; r < BT; ++r) {
    row_stats(inp + r * C, C, static_cast<float>(eps), mean + r, rstd + r);
    normalize_row(out + r * C, inp + r * C, mean[r], rstd[r], weight, bias, C);
  }
}

// dx [C] += s · (g - mean(g) - n · mean(g · n)), g = dy · weight, n = (x - m) · s.
QKV_LN_CLONES
void backward_row(float* dx, const float* dy, const float* x, const float* weight, float m,
                  float s, int64_t C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  const float g_mean = lane_sum(C, [&](int64_t c) { return dy[c] * weight[c]; }) * inv_c;
  const float gn_mean =
      lane_sum(C, [&](int64_t c) { return dy[c] * weight[c] * ((x[c] - m) * s); }) * inv_c;
  for (int64_t c = 0; c < C; ++c) {
    const float n = (x[c] - m) * s;
    dx[c] += s * (dy[c] * weight[c] - g_mean - n * gn_mean);
  }
}

// dweight [n] += Σ_rows dy · n, dbias [n] += Σ_rows dy (dbias may be null)
// for n <= kColBlock channels from lo: rows in order.
QKV_LN_CLONES
void param_block(float* dweight, float* dbias, const float* dout, const float* inp,
                 const float* mean, const float* rstd, int64_t BT, int64_t C, int64_t lo,
                 int64_t n) {
  constexpr int64_t CB = detail::kColBlock;
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

void fast_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                   const float* weight, const float* mean, const float* rstd, int64_t BT,
                   int64_t C) {
  const bool par = BT * C >= detail::kParallelMin;
  // Rows: each is one thread's.
#pragma omp parallel for schedule(static) if (par)
  for (int64_t r = 0; r < BT; ++r)
    backward_row(dinp + r * C, dout + r * C, inp + r * C, weight, mean[r], rstd[r], C);
  // Parameters: sums over rows, one thread per block of channels, rows in order.
  const int64_t CB = detail::kColBlock, blocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t blk = 0; blk < blocks; ++blk)
    param_block(dweight, dbias, dout, inp, mean, rstd, BT, C, blk * CB,
                std::min(CB, C - blk * CB));
}

}  // namespace

// ---- the layer ---------------------------------------------------------------

// out [BT, C] = (inp - mean) · rstd · weight + bias per row, rstd = 1 / sqrt(var + eps);
// mean [BT], rstd [BT].
// bias (and dbias) may be null: LayerNorm without bias, as in nanoGPT.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t BT, int64_t C, double eps) {
  if constexpr (std::is_same_v<T, float>)
    fast_forward(out, mean, rstd, inp, weight, bias, BT, C, eps);
  else
    ref::layernorm_forward(out, mean, rstd, inp, weight, bias, BT, C, eps);
}

// With n = (x - mean) · rstd and g = dout · weight (per row):
//   dinp    [BT, C] += rstd · (g - mean_c(g) - n · mean_c(g · n))
//   dweight [C]     += Σ_rows dout · n
//   dbias   [C]     += Σ_rows dout
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int64_t BT, int64_t C) {
  if constexpr (std::is_same_v<T, float>)
    fast_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C);
  else
    ref::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C);
}

void layernorm_forward(bfloat16* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t BT, int64_t C, double eps) {
  fast_forward(out, mean, rstd, inp, weight, bias, BT, C, eps);
}

template void layernorm_forward(float*, float*, float*, const float*, const float*, const float*,
                                int64_t, int64_t, double);
template void layernorm_forward(double*, double*, double*, const double*, const double*,
                                const double*, int64_t, int64_t, double);
template void layernorm_backward(float*, float*, float*, const float*, const float*, const float*,
                                 const float*, const float*, int64_t, int64_t);
template void layernorm_backward(double*, double*, double*, const double*, const double*,
                                 const double*, const double*, const double*, int64_t, int64_t);

}  // namespace qkv::nn
