/// @file
/// qkv/positional.h: how a model learns where each token is.
///
/// Attention itself is order-blind: permuting the keys permutes nothing in the
/// result. Position enters either added to the token embeddings (sinusoidal or
/// learned tables, GPT-2 style) or rotated into q and k (RoPE, LLaMA style).
/// Tables are float64 (NumPy's default), drawn from qkv/rng.h where random.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

class NumpyGenerator;  ///< qkv/rng.h

/// Vaswani et al. 2017, as a [T, C] float64 table: for i = 0, 1, ...
///   PE[t, 2i]     = sin(t / 10000^(2i / C))
///   PE[t, 2i + 1] = cos(t / 10000^(2i / C))
/// computed literally in that form (a division, not exp(-log(10000)·2i/C)).
/// For odd C the last column is a sine with no cosine partner. PE[0] is
/// [0, 1, 0, 1, ...]. Throws qkv::Error if T < 0 or C < 1.
QKV_API Tensor sinusoidal_encoding(int64_t T, int64_t C);

/// GPT-2's learned position table (wpe).
struct QKV_API LearnedPositionEmbedding {
  Tensor table;  ///< [T_max, C]

  /// table ~ N(0, 0.02^2), float64, like NumPy's rng.normal(0.0, 0.02, (T_max, C)).
  static LearnedPositionEmbedding init(int64_t T_max, int64_t C, NumpyGenerator& rng);

  /// Rows offset .. offset + T - 1 -> [T, C] in the table's dtype. offset
  /// continues a sequence, e.g. one decode step with a KV cache. Throws
  /// qkv::Error if offset + T > T_max.
  Tensor forward(int64_t T, int64_t offset = 0) const;
};

/// GPT-2's token table (wte): one learned row per vocabulary id.
struct QKV_API TokenEmbedding {
  Tensor table;  ///< [vocab, C]

  /// table ~ N(0, 0.02^2), float64, like NumPy's rng.normal(0.0, 0.02, (vocab, C)).
  static TokenEmbedding init(int64_t vocab, int64_t C, NumpyGenerator& rng);

  /// ids [T] -> [T, C]
  Tensor forward(const std::vector<int64_t>& ids) const;
  /// ids laid out row-major as `shape`, e.g. [B, T] -> [B, T, C], in the
  /// table's dtype. Throws qkv::Error naming the first id outside [0, vocab).
  Tensor forward(const std::vector<int64_t>& ids, const Shape& shape) const;
};

/// Rotary position embedding (RoPE, Su et al. 2021), applied to q or k:
/// x [..., T, D] -> [..., T, D], in x's dtype. Row t sits at p = pos0 + t, and
/// with theta_i = base^(-2i/D) each pair (i, i + D/2), i < D/2, turns by p·theta_i:
///   out[i]       = x[i] cos(p·theta_i) - x[i + D/2] sin(p·theta_i)
///   out[i + D/2] = x[i + D/2] cos(p·theta_i) + x[i] sin(p·theta_i)
/// Being a rotation, it keeps norms, and rope(q at m)·rope(k at n) depends only
/// on m - n, which is why scores become relative.
///
/// Convention: this is the half-split pairing of GPT-NeoX and Hugging Face
/// LLaMA (rotate_half). RoFormer and Meta's original LLaMA code pair adjacent
/// dims (2i, 2i + 1) instead; the two agree only after permuting the q and k
/// projection columns, so weights trained under one need that permutation to
/// run under the other. Throws qkv::Error if D is odd, pos0 < 0 or base <= 0.
///
/// The arithmetic is the GPT's: nn::rope_forward with an nn::RopeTable
/// (qkv/nn.h), cos and sin in double, each result rounded once to x's dtype.
/// This one-off call builds a table for its positions pos0 .. pos0 + T - 1;
/// a model builds its table once and keeps it.
QKV_API Tensor apply_rope(const Tensor& x, int64_t pos0 = 0, double base = 10000.0);

}  // namespace qkv
