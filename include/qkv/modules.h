/// @file
/// qkv/modules.h: the building blocks of the attention lessons.
///
///   matmul, Linear         x·W + b, weights stored [in, out] as in the NumPy lessons
///   Head                   lesson 5's single causal head
///   MultiHeadAttention     split heads, attend (MHA, GQA or MQA), merge, project
///
/// Reference maths: the float64 layers of qkv/nn.h (plain loops, the GPT's
/// layers in double), each result rounded once to the input's dtype. Weights
/// may be float32 or float64 independently of the input, so float64 weights
/// drawn like NumPy's can project a float32 input.
/// Shapes use the glossary in qkv/tensor.h; T is a sequence length when queries
/// and keys come from the same tokens (N = S = T).
#pragma once

#include <cstdint>

#include "qkv/attention.h"
#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

class NumpyGenerator;  ///< qkv/rng.h

/// a [..., M, K] · b [K, P] -> [..., M, P] in a's dtype. A 1-D a [K] gives [P],
/// as in NumPy. Throws qkv::Error if K differs or either is not float.
QKV_API Tensor matmul(const Tensor& a, const Tensor& b);

/// A linear layer y = x·W + b, in the lessons' orientation.
struct QKV_API Linear {
  Tensor weight;  ///< [in, out]: y = x·W, the lessons' orientation (PyTorch stores Wᵀ)
  Tensor bias;    ///< [out], or empty for no bias

  /// x [..., in] -> [..., out], in x's dtype.
  Tensor forward(const Tensor& x) const;

  /// weight ~ N(0, 1) / sqrt(in), float64, drawn in C order like NumPy's
  /// `rng.standard_normal((in, out)) / np.sqrt(in)`, so a seed fixes it;
  /// bias zeros [out] when `bias`, else empty. Draws nothing for the bias.
  static Linear init(int64_t in, int64_t out, bool bias, NumpyGenerator& rng);
};

/// One attention head, lesson 5: project x to q, k, v (no bias) and attend
/// with scale 1/sqrt(Dh), causal top-left unless `causal` is false.
struct QKV_API Head {
  Linear query;  ///< weight [C, Dh]
  Linear key;    ///< weight [C, Dh]
  Linear value;  ///< weight [C, Dh]
  bool causal = true;  ///< top-left causal mask (a decoder's head)

  /// x [..., T, C] -> [..., T, Dh]; *weights, if given, gets [..., T, T].
  Tensor forward(const Tensor& x, Tensor* weights = nullptr) const;

  /// Draws query, key then value weights, as the lesson does.
  static Head init(int64_t C, int64_t Dh, NumpyGenerator& rng, bool causal = true);
};

/// Multi-head attention with Hq = heads query heads sharing Hkv = kv_heads
/// key/value heads (GQA; kv_heads == heads is classic MHA, 1 is MQA). A head
/// group, in GQA, is the set of heads / kv_heads query heads that read one
/// key/value head; qkv::attention indexes the shared head, so K and V are
/// projected once per key/value head and never repeated.
struct QKV_API MultiHeadAttention {
  int64_t heads = 0;     ///< Hq, query heads
  int64_t kv_heads = 0;  ///< Hkv, key/value heads (divides heads)
  int64_t head_dim = 0;  ///< Dh
  Linear wq;  ///< [C, Hq*Dh]
  Linear wk;  ///< [C, Hkv*Dh]
  Linear wv;  ///< [C, Hkv*Dh]
  Linear wo;  ///< [Hq*Dh, C]

  /// x_q [..., N, C], x_kv [..., S, C] (same leading dims) -> [..., N, C].
  /// Self-attention is forward(x, x); cross-attention passes another sequence
  /// as x_kv. opts (scale, mask [..., Hq, N, S], causal) go to qkv::attention,
  /// except that the weights come back through `weights` [..., Hq, N, S].
  Tensor forward(const Tensor& x_q, const Tensor& x_kv, const AttentionOptions& opts = {},
                 Tensor* weights = nullptr) const;

  /// Dh = C / heads. Draws wq, wk, wv then wo with Linear::init. Throws
  /// qkv::Error unless heads divides C and kv_heads divides heads.
  static MultiHeadAttention init(int64_t C, int64_t heads, int64_t kv_heads, NumpyGenerator& rng,
                                 bool bias = false);
};

}  // namespace qkv
