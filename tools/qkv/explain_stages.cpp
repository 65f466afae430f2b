#include "explain_stages.h"

#include <cmath>
#include <iostream>

#include "print.h"

namespace qkv::cli {
namespace {

// Matrices wider or taller than this are shown only as a heatmap.
constexpr int64_t kMaxPrinted = 12;

// Copies rows x cols doubles starting at flat element `offset` of t.
Tensor slice2d(const Tensor& t, int64_t offset, int64_t rows, int64_t cols) {
  Tensor out(DType::f64, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) out.data<double>()[i] = t.get(offset + i);
  return out;
}

}  // namespace

void print_stage(const std::string& title, const Tensor& t) {
  std::cout << title << " " << shape_str(t.shape()) << "\n";
  if (t.rank() <= 2 && t.dim(0) <= kMaxPrinted && t.dim(-1) <= kMaxPrinted)
    std::cout << numpy_str(t) << "\n";
}

Tensor split_heads(const Tensor& m, int64_t heads) {
  const int64_t T = m.dim(0), Dh = m.dim(1) / heads;
  Tensor out(DType::f64, {heads, T, Dh});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < Dh; ++e)
        out.data<double>()[(h * T + t) * Dh + e] = m.get(t * m.dim(1) + h * Dh + e);
  return out;
}

std::vector<HeatmapPanel> explain_heads(const ExplainInputs& in, const AttentionResult& res,
                                        const Tensor& weights64, const AttentionOptions& opts,
                                        const std::vector<std::string>& row_labels,
                                        const std::vector<std::string>& col_labels, bool color,
                                        bool raw_scores) {
  const int64_t Hq = in.q.dim(-3), Hkv = in.k.dim(-3), N = in.q.dim(-2), S = in.k.dim(-2);
  const int64_t D = in.q.dim(-1), Dv = in.v.dim(-1);
  const double scale = opts.scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  if (in.q.rank() > 3)
    std::cout << "(batch dims " << shape_str(Shape(in.q.shape().begin(), in.q.shape().end() - 3))
              << ": showing the first batch element)\n";
  std::cout << "mask: " << (opts.mask ? "from --mask, " : "") << "causal " << causal_name(opts.causal)
            << "; scale = " << round4_str(scale) << "\n";
  std::vector<HeatmapPanel> panels;
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t g = h / (Hq / Hkv);
    std::cout << "\n-- head " << h;
    if (Hkv != Hq) std::cout << " (reads key/value head " << g << ")";
    std::cout << " --\n";
    const Tensor qh = slice2d(in.q, h * N * D, N, D);
    const Tensor kh = slice2d(in.k, g * S * D, S, D);
    Tensor raw(DType::f64, {N, S}), scores(DType::f64, {N, S});
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < D; ++e) dot += qh.get(i * D + e) * kh.get(j * D + e);
        raw.data<double>()[i * S + j] = dot;
        scores.data<double>()[i * S + j] = dot * scale;
      }
    if (raw_scores) print_stage("raw scores = q kᵀ, before scaling", raw);
    print_stage("scores = q kᵀ · scale, before masking", scores);
    const double* w = weights64.data<double>() + h * N * S;
    const Tensor wh = slice2d(weights64, h * N * S, N, S);
    print_stage("weights = softmax(scores + mask), each row sums to 1", wh);
    Tensor peak(DType::f64, {N});
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < S; ++j)
        peak.data<double>()[i] = std::fmax(peak.get(i), wh.get(i * S + j));
    if (N <= kMaxPrinted) std::cout << "largest weight in each row: " << numpy_str(peak) << "\n";
    std::cout << heatmap_text(w, N, S, row_labels, col_labels, color);
    print_stage("head output = weights · v", slice2d(res.out, h * N * Dv, N, Dv));
    panels.push_back({"head " + std::to_string(h), w, N, S, row_labels, col_labels});
  }
  return panels;
}

void explain_output(const ExplainInputs& in, const AttentionResult& res,
                    const AttentionOptions& opts, bool rope) {
  const int64_t Hq = res.out.dim(-3), T = res.out.dim(-2), Dv = res.out.dim(-1);
  Tensor concat(DType::f64, {T, Hq * Dv});
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < Dv; ++e)
        concat.data<double>()[t * Hq * Dv + h * Dv + e] = res.out.get((h * T + t) * Dv + e);
  std::cout << "\n";
  print_stage("heads concatenated", concat);
  const Tensor y = matmul(concat, in.mha.wo.weight);
  print_stage("output = concat · W_o", y);
  if (rope) {
    std::cout << "(not compared with MultiHeadAttention::forward, which applies no RoPE)\n";
    return;
  }
  const Tensor ref = in.mha.forward(in.x, in.x, opts);
  double diff = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) diff = std::fmax(diff, std::fabs(y.get(i) - ref.get(i)));
  std::cout << "MultiHeadAttention::forward gives the same output (max |diff| = " << diff << ")\n";
}

}  // namespace qkv::cli
