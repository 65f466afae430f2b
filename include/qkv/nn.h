// qkv/nn.h: the layers of a small GPT, each with its forward and backward.
//
// Plain functions on contiguous float32 buffers, in the style of llm.c:
// outputs first, then inputs, then sizes; a shape comment on each. Backward
// functions ACCUMULATE (+=) into parameter gradients and input gradients, so
// a residual stream's gradient can be summed by several consumers; callers
// zero the gradient buffers once per step.
//
// Sizes: BT rows (batch x time), C channels, OC output channels, V vocab.
#pragma once

#include <cstdint>

namespace qkv::nn {

// out [BT, OC] = inp [BT, C] · weightᵀ + bias, weight [OC, C] (PyTorch's
// nn.Linear layout, so checkpoints load in PyTorch as they are), bias [OC]
// or null. Runs on the GEMM backend (see gemm.h).
void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC);
// dinp [BT, C] += dout · weight;  dweight [OC, C] += doutᵀ · inp;  dbias [OC] += Σ dout.
// dbias may be null (no bias).
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t BT, int64_t C, int64_t OC);

// out [BT, C] = (inp - mean) * rstd * weight + bias per row, eps = 1e-5;
// mean [BT] and rstd [BT] saved for the backward. bias (and dbias) may be null.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t BT, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t BT, int64_t C);

// GELU, tanh form: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))). N elements.
void gelu_forward(float* out, const float* inp, int64_t N);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N);

// out [B*T, C] = wte[tokens[b,t]] + wpe[t]; wte [V, C], wpe [maxT, C]
// (wpe may be null: no learned positions, e.g. with RoPE).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C);

// probs [BT, V] = softmax(logits); losses [BT] = -log probs[target].
void crossentropy_forward(float* losses, float* probs, const float* logits,
                          const int32_t* targets, int64_t BT, int64_t V);
// dlogits [BT, V] += (probs - onehot(target)) * dloss, dloss the gradient of
// the loss w.r.t. each row's loss (1 / BT for a mean).
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           float dloss, int64_t BT, int64_t V);

// out = a + b, N elements (the residual stream).
void residual_forward(float* out, const float* a, const float* b, int64_t N);

}  // namespace qkv::nn
