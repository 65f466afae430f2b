// layers/nn_ref.h: the layers of qkv/nn.h as plain loops over any float type.
//
// The maths of each op stated once, with no threads, no GEMM backend and no
// approximations, in the same argument order and with the same contracts as
// qkv/nn.h (backward functions ACCUMULATE). Each is defined in its layer's
// file beside the fast float32 path and instantiated for float and double:
// nn::<op><double> IS ref::<op><double> (the lessons' and the gradient test's
// arithmetic); ref::<op><float>, the same loops in float, is what the tests
// hold the fast float32 path's error to. Every sum runs in T, in index order.
#pragma once

#include <cstdint>

#include "qkv/nn.h"

namespace qkv::nn::ref {

// GELU, tanh form: 0.5 x (1 + tanh(u)), u = √(2/π) (x + 0.044715 x³).
inline constexpr double kGeluScale = 0.7978845608028654;  // √(2/π)
inline constexpr double kGeluCubic = 0.044715;
inline constexpr double kSqrtHalf = 0.7071067811865476;      // 1/√2
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1/√(2π)

// out [BT, OC] = inp [BT, C] · W + bias: per output, the C products summed
// from 0 in order c = 0..C-1, then the bias added (NumPy's x @ W + b).
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t BT, int64_t C,
                    int64_t OC, WeightLayout layout = WeightLayout::out_in);
// dinp += dout · weight (= under dinp_mode overwrite); dweight += doutᵀ · inp and
// dbias += Σ_rows dout (= under param_mode overwrite) (weight [OC, C]).
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t BT, int64_t C, int64_t OC, Grad dinp_mode = Grad::accumulate,
                     Grad param_mode = Grad::accumulate);

// Per row: mean, biased variance, rstd = 1/√(var + eps), out = (x - mean) · rstd · w + b.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t BT, int64_t C, double eps = 1e-5);
// With n = (x - mean) · rstd and g = dout · w:
//   dx += rstd · (g - mean_c(g) - n · mean_c(g · n)),  dw += Σ_rows dout · n,  db += Σ_rows dout.
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int64_t BT, int64_t C);

// tanh:  d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) · √(2/π) (1 + 3 · 0.044715 x²).
// exact: gelu(x) = x Φ(x), Φ(x) = 0.5 (1 + erf(x / √2)) (std::erf);
//        d/dx = Φ(x) + x φ(x), φ(x) = exp(-x² / 2) / √(2π).
template <class T>
void gelu_forward(T* out, const T* inp, int64_t N, Gelu form);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t N, Gelu form,
                   Grad dinp_mode = Grad::accumulate);

// SwiGLU: out [BT, F] = silu(g) · u with silu(g) = g / (1 + e^-g), g =
// inp[:, :F], u = inp[:, F:] (inp [BT, 2F]); in double, rounded once.
template <class T>
void swiglu_forward(T* out, const T* inp, int64_t BT, int64_t F);

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C);
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t Tn, int64_t C);

// probs = softmax(logits) per row (max subtracted first); loss = -log probs[target].
template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                          int64_t BT, int64_t V);
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                           int64_t BT, int64_t V);

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t N);

}  // namespace qkv::nn::ref
