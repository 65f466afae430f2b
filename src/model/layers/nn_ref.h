// nn/nn_ref.h: the layers of qkv/nn.h as plain loops over any float type.
//
// The maths of each op stated once, with no threads, no GEMM backend and no
// approximations, in the same argument order and with the same contracts as
// qkv/nn.h (backward functions ACCUMULATE). With T = double they are the
// truth the tests hold the float32 path to, and what the finite-difference
// gradient checks run on. Every sum runs in T, in index order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace qkv::nn::ref {

// out [BT, OC] = inp [BT, C] · weightᵀ [C, OC] + bias [OC] (bias may be null).
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t BT, int64_t C,
                    int64_t OC) {
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t o = 0; o < OC; ++o) {
      T acc = bias ? bias[o] : T(0);
      for (int64_t c = 0; c < C; ++c) acc += inp[r * C + c] * weight[o * C + c];
      out[r * OC + o] = acc;
    }
}

// dinp += dout · weight; dweight += doutᵀ · inp; dbias += Σ_rows dout.
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t BT, int64_t C, int64_t OC) {
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t o = 0; o < OC; ++o) acc += dout[r * OC + o] * weight[o * C + c];
      dinp[r * C + c] += acc;
    }
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) {
      T acc = 0;
      for (int64_t r = 0; r < BT; ++r) acc += dout[r * OC + o] * inp[r * C + c];
      dweight[o * C + c] += acc;
    }
  if (dbias)
    for (int64_t o = 0; o < OC; ++o) {
      T acc = 0;
      for (int64_t r = 0; r < BT; ++r) acc += dout[r * OC + o];
      dbias[o] += acc;
    }
}

inline constexpr double kLayerNormEps = 1e-5;

// Per row: mean, biased variance, rstd = 1/√(var + eps), out = (x - mean) · rstd · w + b.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t BT, int64_t C) {
  for (int64_t r = 0; r < BT; ++r) {
    const T* x = inp + r * C;
    T m = 0;
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<T>(C);
    T v = 0;
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= static_cast<T>(C);
    const T s = T(1) / std::sqrt(v + static_cast<T>(kLayerNormEps));
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

// With n = (x - mean) · rstd and g = dout · w:
//   dx = rstd · (g - mean_c(g) - n · mean_c(g · n)),  dw += Σ_rows dout · n,  db += Σ_rows dout.
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
      dbias[c] += dy[c];
    }
  }
}

// GELU, tanh form: 0.5 x (1 + tanh(u)), u = √(2/π) (x + 0.044715 x³).
inline constexpr double kGeluScale = 0.7978845608028654;  // √(2/π)
inline constexpr double kGeluCubic = 0.044715;

template <class T>
void gelu_forward(T* out, const T* inp, int64_t N) {
  for (int64_t i = 0; i < N; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

// d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) · √(2/π) (1 + 3 · 0.044715 x²).
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t N) {
  for (int64_t i = 0; i < N; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    const T t = std::tanh(u);
    const T du = static_cast<T>(kGeluScale) * (T(1) + T(3) * static_cast<T>(kGeluCubic) * x * x);
    dinp[i] += dout[i] * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du);
  }
}

// out [B, T, C] = wte [tokens[b, t]] + wpe [t] (wpe may be null).
template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t r = b * Tn + t;
      const T* e = wte + static_cast<int64_t>(tokens[r]) * C;
      for (int64_t c = 0; c < C; ++c) out[r * C + c] = e[c] + (wpe ? wpe[t * C + c] : T(0));
    }
}

// dwte [tokens[b, t]] += dout [b, t]; dwpe [t] += dout [b, t] (dwpe may be null).
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t Tn, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      const int64_t r = b * Tn + t;
      T* e = dwte + static_cast<int64_t>(tokens[r]) * C;
      for (int64_t c = 0; c < C; ++c) {
        e[c] += dout[r * C + c];
        if (dwpe) dwpe[t * C + c] += dout[r * C + c];
      }
    }
}

// probs = softmax(logits) per row (max subtracted first); loss = -log probs[target].
template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                          int64_t BT, int64_t V) {
  for (int64_t r = 0; r < BT; ++r) {
    const T* z = logits + r * V;
    T m = z[0];
    for (int64_t v = 1; v < V; ++v) m = std::max(m, z[v]);
    T sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - m);
    for (int64_t v = 0; v < V; ++v) probs[r * V + v] = std::exp(z[v] - m) / sum;
    losses[r] = -std::log(probs[r * V + targets[r]]);
  }
}

// dlogits += (probs - onehot(target)) · dloss.
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                           int64_t BT, int64_t V) {
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t v = 0; v < V; ++v)
      dlogits[r * V + v] += (probs[r * V + v] - (v == targets[r] ? T(1) : T(0))) * dloss;
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t N) {
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

}  // namespace qkv::nn::ref
