// The two practice tasks of "Self-attention from scratch", worked out.
// The lesson prints no answers, so these parts state their inputs exactly
// (NumPy calls a learner can repeat) and print what those inputs give.
#include <cmath>
#include <string>

#include "demo_lesson.h"
#include "demo_maths.h"
#include "qkv/attention.h"
#include "qkv/modules.h"

namespace qkv::cli::demo {
namespace {

// How close softmax rows are to one-hot: the mean of each row's largest
// weight, and the share of rows whose largest weight is above 0.9.
struct Peakedness { double mean_max, share_above; };

Peakedness peakedness(const Tensor& weights) {
  const Tensor m = row_max(weights);
  int64_t above = 0;
  for (int64_t i = 0; i < m.numel(); ++i) above += m.get(i) > 0.9;
  return {pairwise_sum(m.data<double>(), m.numel()) / static_cast<double>(m.numel()),
          static_cast<double>(above) / static_cast<double>(m.numel())};
}

}  // namespace

void practice_unscaled(const Lesson2& l, const Printer& p) {
  // The task: rerun 2.2 with d_k = 16, so a fresh default_rng(42) now draws
  // 4 x 16 matrices, and leave out the division by √d_k.
  NumpyGenerator rng(42);
  const Tensor W_q = normal(rng, {4, 16}), W_k = normal(rng, {4, 16});
  const Tensor scores = matmul(matmul(l.X, W_q), transpose(matmul(l.X, W_k)));
  const Tensor unscaled = softmax_rows(scores);
  const Tensor scaled = softmax_rows(map(scores, [](double s) { return s / 4.0; }));
  p.line("The lesson's X, W_q and W_k now 4 x 16 from a fresh default_rng(42); scores = Q Kᵀ:");
  p.array(scores);
  p.line("softmax(scores), no scaling:");
  p.array(unscaled);
  p.line("softmax(scores / √16), as the lesson scales:");
  p.array(scaled);
  p.line("largest weight in each row, unscaled then scaled:");
  p.array(row_max(unscaled));
  p.array(row_max(scaled));

  // The lesson's X is small (entries below 1), which tames the effect; with
  // unit-variance queries and keys, as in 2.3, it grows with d_k.
  p.line("With unit-variance q and k (default_rng(0); per d_k, q then k of shape (1000, 4, d_k),");
  p.line("i.e. 4000 rows of 4 weights), how peaked the rows are:");
  p.line("  d_k   mean largest weight   rows with a weight > 0.9");
  p.line("        unscaled   scaled     unscaled   scaled");
  NumpyGenerator unit(0);
  for (const int64_t d_k : {3, 16, 64}) {
    const Tensor q = normal(unit, {1000, 4, d_k}), k = normal(unit, {1000, 4, d_k});
    Tensor raw(DType::f64, {4000, 4});
    for (int64_t set = 0; set < 1000; ++set)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < d_k; ++e)
            dot += q.get((set * 4 + i) * d_k + e) * k.get((set * 4 + j) * d_k + e);
          raw.data<double>()[(set * 4 + i) * 4 + j] = dot;
        }
    const double root = std::sqrt(static_cast<double>(d_k));
    const Peakedness u = peakedness(softmax_rows(raw));
    const Peakedness s = peakedness(softmax_rows(map(raw, [&](double x) { return x / root; })));
    p.line(fixed_str(static_cast<double>(d_k), 0, 5) + "   " + p.fixed(u.mean_max, 2, 8) +
           "   " + p.fixed(s.mean_max, 2, 6) + "     " + p.percent(u.share_above) + "        " +
           p.percent(s.share_above));
  }
  p.line("Without the scaling, the larger d_k the closer each row gets to one-hot: softmax's");
  p.line("gradient vanishes there. Divided by √d_k the rows stay as soft at d_k = 64 as at 3.");
  p.line("Try it on your own words: qkv explain --d-k 16 --scale 1 --raw-scores");
}

void practice_padding(const Lesson2& l, const Printer& p) {
  // One sequence of the batch: the four tokens of 2.2 and two <pad> tokens.
  // <pad> gets the zero embedding (a common choice); its key is then zero and
  // its score 0, higher than most of "cat"'s, so without a mask it takes
  // weight. The projections are 2.2's W_q, W_k, W_v.
  Tensor X6(DType::f64, {6, 4});
  for (int64_t i = 0; i < l.X.numel(); ++i) X6.data<double>()[i] = l.X.get(i);
  const Tensor Q = matmul(X6, l.W_q), K = matmul(X6, l.W_k), V = matmul(X6, l.W_v);
  const Tensor scaled = map(matmul(Q, transpose(K)), [](double s) { return s / std::sqrt(3.0); });
  Tensor is_token(DType::boolean, {6});  // True for real tokens, False for <pad>
  for (int64_t j = 0; j < 4; ++j) is_token.data<bool>()[j] = true;

  p.line("\"the cat sat down <pad> <pad>\": 2.2's X with two zero rows for <pad>, 2.2's W_q, W_k, "
         "W_v. Weights with no mask:");
  p.array(softmax_rows(scaled));
  p.line("The padding mask, one entry per key (1 = a real token), broadcast over every query row:");
  p.ints(is_token);
  const Tensor masked = softmax_rows(where_allowed(is_token, scaled));
  p.line("Weights with the mask (np.where(mask, scores, -inf) before softmax):");
  p.array(masked);
  Tensor on_pad(DType::f64, {6});
  for (int64_t i = 0; i < 6; ++i)
    on_pad.data<double>()[i] = masked.get(i * 6 + 4) + masked.get(i * 6 + 5);
  p.line("weight every row gives to the <pad> keys:");
  p.array(on_pad);

  // The real tokens' rows must be 2.2's weights: the mask removes the pads as
  // if they were never there.
  Tensor real_rows(DType::f64, {4, 4});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) real_rows.data<double>()[i * 4 + j] = masked.get(i * 6 + j);
  p.line(std::string("the four real tokens' rows are 2.2's weights (np.allclose): ") +
         (allclose(real_rows, l.weights) ? "True" : "False"));
  // qkv::attention takes the same mask [S] (NumPy broadcasting to [1, N, S]).
  AttentionOptions opts;
  opts.kernel = Kernel::reference;
  opts.mask = is_token;
  const Tensor out = attention(Q.reshaped({1, 6, 3}), K.reshaped({1, 6, 3}),
                               V.reshaped({1, 6, 3}), opts).out;
  p.line(std::string("attention(Q, K, V, mask) with that (6,) array gives masked weights @ V: ") +
         (allclose(out.reshaped({6, 3}), matmul(masked, V)) ? "True" : "False"));
  p.line("The <pad> rows still attend to the real tokens; their outputs are simply never used.");
  p.line("For a batch, one such row per sequence: mask shape (B, 1, 1, S) against (B, H, N, S).");
  p.line("Try it on your own words: qkv explain --tokens \"the cat sat <pad> <pad>\" --mask pad.npy");
}

}  // namespace qkv::cli::demo
