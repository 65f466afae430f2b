// qkv explain: every stage of attention for the user's own words (seeded
// random embeddings and weights) or their own q/k/v .npy files, and the
// weights as a picture: shaded in the terminal, and a PNG with --png.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "cli_common.h"
#include "commands.h"
#include "explain_stages.h"
#include "qkv/attention.h"
#include "qkv/heatmap.h"
#include "qkv/modules.h"
#include "qkv/positional.h"
#include "qkv/rng.h"

namespace qkv::cli {
namespace {

struct ExplainArgs {
  std::string tokens = "the cat sat down";
  int64_t d_model = 8, heads = 2, kv_heads = 0, seed = 0;
  std::string causal = "none", positions = "none";
  std::string q, k, v, mask, png;
  bool no_color = false;
};

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Labels for a sequence of n positions: the user's tokens when they fit,
// else prefix0, prefix1, ...
std::vector<std::string> labels_for(const std::vector<std::string>& tokens, int64_t n,
                                    const std::string& prefix) {
  if (static_cast<int64_t>(tokens.size()) == n) return tokens;
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// Token mode: embeddings, projections and heads from a seed; returns q, k, v
// [Hq or Hkv, T, Dh] after printing the stages that lead to them.
ExplainInputs inputs_from_tokens(const ExplainArgs& a, const std::vector<std::string>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t kv_heads = a.kv_heads ? a.kv_heads : a.heads;
  if (a.d_model < 1) throw UsageError("--d-model: expected a positive integer, found " + std::to_string(a.d_model));
  if (a.heads < 1) throw UsageError("--heads: expected a positive integer, found " + std::to_string(a.heads));
  if (a.d_model % a.heads != 0)
    throw UsageError("--heads: expected a divisor of --d-model " + std::to_string(a.d_model) +
                     ", found " + std::to_string(a.heads));
  if (kv_heads < 1 || a.heads % kv_heads != 0)
    throw UsageError("--kv-heads: expected a divisor of --heads " + std::to_string(a.heads) +
                     ", found " + std::to_string(kv_heads));
  if (a.positions == "rope" && (a.d_model / a.heads) % 2 != 0)
    throw UsageError("--positions rope: expected an even head dim, found d_model / heads = " +
                     std::to_string(a.d_model / a.heads));

  NumpyGenerator rng(static_cast<uint64_t>(a.seed));
  // One embedding per distinct word, so a repeated word gets the same vector.
  std::vector<std::string> vocab;
  std::vector<int64_t> ids;
  for (const auto& t : tokens) {
    auto it = std::find(vocab.begin(), vocab.end(), t);
    ids.push_back(it - vocab.begin());
    if (it == vocab.end()) vocab.push_back(t);
  }
  Tensor table(DType::f64, {static_cast<int64_t>(vocab.size()), a.d_model});
  rng.normal(table.data<double>(), static_cast<size_t>(table.numel()));
  Tensor X(DType::f64, {T, a.d_model});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < a.d_model; ++c)
      X.data<double>()[t * a.d_model + c] = table.get(ids[t] * a.d_model + c);
  print_stage("token embeddings X (seed " + std::to_string(a.seed) + ", one row per token)", X);
  if (a.positions == "sinusoidal") {
    const Tensor pe = sinusoidal_encoding(T, a.d_model);
    for (int64_t i = 0; i < X.numel(); ++i) X.data<double>()[i] += pe.get(i);
    print_stage("X + sinusoidal position encoding", X);
  }
  const MultiHeadAttention mha = MultiHeadAttention::init(a.d_model, a.heads, kv_heads, rng);
  ExplainInputs in;
  in.q = split_heads(matmul(X, mha.wq.weight), a.heads);
  in.k = split_heads(matmul(X, mha.wk.weight), kv_heads);
  in.v = split_heads(matmul(X, mha.wv.weight), kv_heads);
  std::cout << "projections: Q = X W_q " << shape_str(in.q.shape()) << ", K = X W_k "
            << shape_str(in.k.shape()) << ", V = X W_v " << shape_str(in.v.shape())
            << "   [heads, tokens, head dim]\n";
  if (a.positions == "rope") {
    in.q = apply_rope(in.q);
    in.k = apply_rope(in.k);
    std::cout << "RoPE applied to Q and K (half-split pairs, base 10000)\n";
  }
  in.mha = mha;
  in.x = X;
  return in;
}

int run_explain(const ExplainArgs& a) {
  const bool from_files = !a.q.empty() || !a.k.empty() || !a.v.empty();
  if (from_files && (a.q.empty() || a.k.empty() || a.v.empty()))
    throw UsageError("--q, --k, --v: expected all three .npy files together, found only some");
  const std::vector<std::string> tokens = split_words(a.tokens);
  if (!from_files && tokens.empty())
    throw UsageError("--tokens: expected at least one word, found an empty string");

  ExplainInputs in;
  Tensor mask;
  if (from_files) {
    in.q = load_npy_arg("--q", a.q);
    in.k = load_npy_arg("--k", a.k);
    in.v = load_npy_arg("--v", a.v);
    if (!a.mask.empty()) mask = load_npy_arg("--mask", a.mask);
  } else {
    in = inputs_from_tokens(a, tokens);
  }
  AttentionOptions opts;
  opts.causal = *parse_causal(a.causal);
  if (!a.mask.empty()) opts.mask = mask;
  opts.return_weights = true;
  const AttentionResult res = attention(in.q, in.k, in.v, opts);

  const int64_t N = in.q.dim(-2), S = in.k.dim(-2);
  const auto row_labels = labels_for(tokens, N, "q");
  const auto col_labels = labels_for(tokens, S, "k");
  const Tensor weights64 = res.weights.to(DType::f64);
  const std::vector<HeatmapPanel> panels = explain_heads(
      in, res, weights64, opts, row_labels, col_labels, !a.no_color && stdout_wants_color());
  if (!from_files) explain_output(in, res, opts);
  if (!a.png.empty()) {
    try {
      write_heatmap_png(a.png, panels);
    } catch (const Error& e) {
      throw Error(std::string("--png: ") + e.what());
    }
    std::cout << "wrote " << panels.size() << " heatmap panel" << (panels.size() > 1 ? "s" : "")
              << " to " << a.png << "\n";
  }
  return 0;
}

}  // namespace

Runner add_explain(CLI::App& app) {
  auto a = std::make_shared<ExplainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Every stage of attention for your own words (or q/k/v .npy files), with the weights as a "
      "heatmap in the terminal and, with --png, as a picture.");
  cmd->add_option("--tokens", a->tokens, "words to attend over, split on spaces")->capture_default_str();
  cmd->add_option("--d-model", a->d_model, "embedding width C")->capture_default_str();
  cmd->add_option("--heads", a->heads, "query heads (must divide --d-model)")->capture_default_str();
  cmd->add_option("--kv-heads", a->kv_heads, "key/value heads for GQA (default: --heads)");
  cmd->add_option("--seed", a->seed, "seed for embeddings and weights (NumPy default_rng)")
      ->capture_default_str();
  cmd->add_option("--positions", a->positions, "position information added to the tokens")
      ->check(CLI::IsMember({"none", "sinusoidal", "rope"}))
      ->capture_default_str();
  cmd->add_option("--causal", a->causal, "none, top-left or bottom-right (see qkv attention --help)")
      ->check(CLI::IsMember({"none", "top-left", "bottom-right"}))
      ->capture_default_str();
  cmd->add_option("--q", a->q, "explain these queries [..., Hq, N, D] (.npy) instead of --tokens");
  cmd->add_option("--k", a->k, "keys [..., Hkv, S, D] (.npy)");
  cmd->add_option("--v", a->v, "values [..., Hkv, S, Dv] (.npy)");
  cmd->add_option("--mask", a->mask, "bool or additive mask broadcastable to [..., Hq, N, S] (.npy)");
  cmd->add_option("--png", a->png, "also draw the weights to this PNG file, one panel per head");
  cmd->add_flag("--no-color", a->no_color, "shade the terminal heatmap with characters, not colour");
  return [a] { return run_explain(*a); };
}

}  // namespace qkv::cli
