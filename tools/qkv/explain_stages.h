// explain_stages.h: the printing half of `qkv explain`.
#pragma once

#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/heatmap.h"
#include "qkv/modules.h"

namespace qkv::cli {

struct ExplainInputs {
  Tensor q, k, v;          // [..., Hq, N, D], [..., Hkv, S, D], [..., Hkv, S, Dv]
  Tensor x;                // token mode only: the embeddings [T, C]
  MultiHeadAttention mha;  // token mode only: the weights that made q, k, v
};

// Prints a titled matrix, NumPy style.
void print_stage(const std::string& title, const Tensor& t);

// m [T, H*Dh] -> [H, T, Dh]
Tensor split_heads(const Tensor& m, int64_t heads);

// For each head of the first batch element: the raw scores q kᵀ when
// `raw_scores`, scaled scores, weights (as numbers when small, always as a
// shaded heatmap), each row's largest weight (how peaked softmax is) and the
// head's output. weights64 is res.weights as float64; the returned panels
// (one per head) point into it.
std::vector<HeatmapPanel> explain_heads(const ExplainInputs& in, const AttentionResult& res,
                                        const Tensor& weights64, const AttentionOptions& opts,
                                        const std::vector<std::string>& row_labels,
                                        const std::vector<std::string>& col_labels, bool color,
                                        bool raw_scores);

// Token mode: concatenate the heads, project with W_o, and check the result
// against MultiHeadAttention::forward, unless `rope`: that module adds no
// rotary positions, so it would compute another thing.
void explain_output(const ExplainInputs& in, const AttentionResult& res,
                    const AttentionOptions& opts, bool rope);

}  // namespace qkv::cli
