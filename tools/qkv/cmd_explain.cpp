// qkv explain: every stage of attention for the user's own words (seeded
// random embeddings and weights) or their own q/k/v .npy files, and the
// weights as a picture: shaded in the terminal, and a PNG with --png.
// Both forms take a --mask, --scale and --raw-scores, so the lessons' practice
// tasks (no √d_k scaling, a padding mask) can be tried on one's own words.
// A third form, --model (explain_model.cpp), shows a trained model's own
// attention over a --prompt.
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli_common.h"
#include "model_threads.h"
#include "field_flags.h"
#include "commands.h"
#include "explain_model.h"
#include "explain_stages.h"
#include "one_head.h"
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
  std::optional<int64_t> d_k;   // head dim; default d_model / heads
  std::optional<double> scale;  // default 1/sqrt(head dim)
  // Words form: attention alone is order-blind, so without positions "dog
  // bites man" and "man bites dog" would give the same rows, only permuted.
  std::string causal = "none", positions = "sinusoidal";
  std::string q, k, v, mask, png;
  bool no_color = false, raw_scores = false;
  ExplainModelArgs model;  // the --model form; its png and color are copied from above
};

// The options of the words and .npy forms, and why each means nothing for a
// trained model: refused with --model rather than silently ignored.
struct WordsOnly {
  const char* option;
  const char* why;
};
constexpr WordsOnly kWordsOnly[] = {
    {"--tokens", "the text to explain is --prompt"},
    {"--q", "q, k and v come from the checkpoint"},
    {"--k", "q, k and v come from the checkpoint"},
    {"--v", "q, k and v come from the checkpoint"},
    {"--d-model", "the checkpoint's config.json sets the model's shape"},
    {"--heads", "the checkpoint's config.json sets the model's shape (--head picks one head)"},
    {"--kv-heads", "the checkpoint's config.json sets the model's shape"},
    {"--d-k", "the checkpoint's config.json sets the model's shape"},
    {"--positions", "the checkpoint's config.json sets its positions (learned or RoPE)"},
    {"--seed", "the weights are the checkpoint's, not drawn"},
    {"--causal", "a GPT's attention is causal, as it was trained"},
    {"--mask", "a GPT's attention is causal, as it was trained"},
    {"--scale", "the model's scale is 1/sqrt(head dim), as it was trained"},
    {"--raw-scores", "the model's view shows the weights"},
};
// The options of the --model form only.
constexpr const char* kModelOnly[] = {"--prompt", "--html", "--layer", "--head", "--weights-npy", "--threads"};

// Refuses the options of the other forms: those of the words and .npy forms
// with --model, those of --model without it.
void check_form(const ExplainArgs& a, const CLI::App& cmd) {
  if (!a.model.model_dir.empty()) {
    for (const WordsOnly& w : kWordsOnly)
      if (cmd.count(w.option) > 0)
        throw UsageError(std::string(w.option) + ": not used with --model: " + w.why);
    if (cmd.count("--prompt") == 0)
      throw UsageError("--prompt: required with --model (the text whose attention to show)");
    return;
  }
  for (const char* option : kModelOnly)
    if (cmd.count(option) > 0)
      throw UsageError(std::string(option) + ": only with --model (a trained model's attention)");
}

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

// The seed of a word's embedding: a hash of the word (64-bit FNV-1a) mixed
// with --seed. Like a row of a trained model's embedding table, a word's
// vector then depends on the word alone, not on the sentence or the word's
// place in it, so that only position information tells "dog bites man" from
// "man bites dog".
uint64_t word_seed(const std::string& word, int64_t seed) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : word) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h ^ static_cast<uint64_t>(seed);
}

// Token mode: embeddings, projections and heads from a seed; returns q, k, v
// [Hq or Hkv, T, Dh] after printing the stages that lead to them.
ExplainInputs inputs_from_tokens(const ExplainArgs& a, const std::vector<std::string>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t kv_heads = a.kv_heads ? a.kv_heads : a.heads;
  if (a.d_model < 1) throw UsageError("--d-model: expected a positive integer, found " + std::to_string(a.d_model));
  if (a.heads < 1) throw UsageError("--heads: expected a positive integer, found " + std::to_string(a.heads));
  if (a.d_k && *a.d_k < 1)
    throw UsageError("--d-k: expected a positive integer, found " + std::to_string(*a.d_k));
  // With --d-k the heads need not split d_model: W_q is then [d_model, heads * d_k].
  if (!a.d_k && a.d_model % a.heads != 0)
    throw UsageError("--heads: expected a divisor of --d-model " + std::to_string(a.d_model) +
                     " (or give --d-k), found " + std::to_string(a.heads));
  if (kv_heads < 1 || a.heads % kv_heads != 0)
    throw UsageError("--kv-heads: expected a divisor of --heads " + std::to_string(a.heads) +
                     ", found " + std::to_string(kv_heads));
  const int64_t d_head = a.d_k.value_or(a.d_model / a.heads);
  // Refused before anything is allocated: W_q, W_k, W_v, W_o and the
  // embeddings, projections and outputs, all float64 (in double, so sizes
  // whose product overflows are compared correctly too).
  const double C = static_cast<double>(a.d_model), dh = static_cast<double>(d_head);
  const double weights = C * dh * static_cast<double>(2 * a.heads + 2 * kv_heads);
  const double acts = static_cast<double>(T) * (4.0 * C + dh * static_cast<double>(2 * a.heads + 2 * kv_heads));
  const std::string refused = memory_shortfall(
      "--d-model " + std::to_string(a.d_model) + " --heads " + std::to_string(a.heads) +
          ": the weights W_q, W_k, W_v, W_o and the activations",
      8.0 * (weights + acts));
  if (!refused.empty()) throw UsageError(refused);
  if (a.positions == "rope" && d_head % 2 != 0)
    throw UsageError("--positions rope: expected an even head dim, found " +
                     std::string(a.d_k ? "--d-k " : "d_model / heads = ") + std::to_string(d_head));

  Tensor X(DType::f64, {T, a.d_model});
  for (int64_t t = 0; t < T; ++t) {
    NumpyGenerator word_rng(word_seed(tokens[static_cast<size_t>(t)], a.seed));
    word_rng.normal(X.data<double>() + t * a.d_model, static_cast<size_t>(a.d_model));
  }
  print_stage("token embeddings X (one row per word, drawn from the word and seed " +
                  std::to_string(a.seed) + ")",
              X);
  if (a.positions == "sinusoidal") {
    const Tensor pe = sinusoidal_encoding(T, a.d_model);
    for (int64_t i = 0; i < X.numel(); ++i) X.data<double>()[i] += pe.get(i);
    print_stage("X + sinusoidal position encoding", X);
  }
  NumpyGenerator rng(static_cast<uint64_t>(a.seed));
  // W_q, W_k, W_v, W_o drawn in that order, as MultiHeadAttention::init does,
  // so that without --d-k the weights are exactly init's.
  MultiHeadAttention mha;
  mha.heads = a.heads;
  mha.kv_heads = kv_heads;
  mha.head_dim = d_head;
  mha.wq = Linear::init(a.d_model, a.heads * d_head, false, rng);
  mha.wk = Linear::init(a.d_model, kv_heads * d_head, false, rng);
  mha.wv = Linear::init(a.d_model, kv_heads * d_head, false, rng);
  mha.wo = Linear::init(a.heads * d_head, a.d_model, false, rng);
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

int run_explain(ExplainArgs& a, const CLI::App& cmd) {
  check_form(a, cmd);
  if (!a.model.model_dir.empty()) {
    a.model.png = a.png;
    a.model.color = !a.no_color && stdout_wants_color();
    return explain_model(a.model);
  }
  const bool from_files = !a.q.empty() || !a.k.empty() || !a.v.empty();
  if (from_files && (a.q.empty() || a.k.empty() || a.v.empty()))
    throw UsageError("--q, --k, --v: expected all three .npy files together, found only some");
  if (from_files && a.d_k)
    throw UsageError("--d-k: sets the head dim of the words form; with --q it is q's last dim");
  const std::vector<std::string> tokens = split_words(a.tokens);
  if (!from_files && tokens.empty())
    throw UsageError("--tokens: expected at least one word, found an empty string");
  if (a.scale && !std::isfinite(*a.scale))
    throw UsageError("--scale: expected a finite number, found " + std::to_string(*a.scale));
  const Causal causal = as_usage(kAttentionFlags, [&] { return parse_causal(a.causal); });

  // The mask is read in both forms, before anything is printed: in the words
  // form it is broadcast against [Hq, T, T], e.g. one bool per word for padding.
  Tensor mask;
  if (!a.mask.empty()) mask = load_npy_arg("--mask", a.mask);
  ExplainInputs in;
  if (from_files) {
    in.q = load_npy_arg("--q", a.q);
    in.k = load_npy_arg("--k", a.k);
    in.v = load_npy_arg("--v", a.v);
    if (lift_one_head(in.q, in.k, in.v))
      std::cout << "q, k, v are 2-D (N, D): one head\n";
  } else {
    in = inputs_from_tokens(a, tokens);
  }
  AttentionOptions opts;
  opts.causal = causal;
  if (!a.mask.empty()) opts.mask = mask;
  opts.scale = a.scale;
  opts.return_weights = true;
  const AttentionResult res = attention(in.q, in.k, in.v, opts);

  const int64_t N = in.q.dim(-2), S = in.k.dim(-2);
  const auto row_labels = labels_for(tokens, N, "q");
  const auto col_labels = labels_for(tokens, S, "k");
  const Tensor weights64 = res.weights.to(DType::f64);
  const std::vector<HeatmapPanel> panels =
      explain_heads(in, res, weights64, opts, row_labels, col_labels,
                    !a.no_color && stdout_wants_color(), a.raw_scores);
  if (!from_files) explain_output(in, res, opts, a.positions == "rope");
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
      "heatmap in the terminal and, with --png, as a picture. With --model: what a model trained "
      "by `qkv train` attends to in a --prompt, every layer and head, also as an HTML page.");
  cmd->add_option("--tokens", a->tokens, "words to attend over, split on spaces")->capture_default_str();
  cmd->add_option("--d-model", a->d_model, "embedding width C")->capture_default_str();
  cmd->add_option("--heads", a->heads, "query heads (must divide --d-model unless --d-k is given)")
      ->capture_default_str();
  cmd->add_option("--kv-heads", a->kv_heads, "key/value heads for GQA (default: --heads)");
  cmd->add_option("--seed", a->seed,
                  "seed of the weights (NumPy default_rng) and, mixed with each word, of its "
                  "embedding")
      ->capture_default_str();
  cmd->add_option("--d-k", a->d_k, "head dim of the words form (default d_model / heads)");
  cmd->add_option("--scale", a->scale, "score scale (default 1/sqrt(head dim); 1 = no scaling)");
  cmd->add_flag("--raw-scores", a->raw_scores, "also print q kᵀ before scaling, for each head");
  cmd->add_option("--positions", a->positions,
                  "position information added to the tokens (none makes word order invisible)")
      ->check(CLI::IsMember({"none", "sinusoidal", "rope"}))
      ->capture_default_str();
  cmd->add_option("--causal", a->causal, "none, top-left or bottom-right (see qkv attention --help)")
      ->capture_default_str();
  cmd->add_option("--q", a->q,
                  "explain these queries [..., Hq, N, D] or 2-D (N, D), one head (.npy), "
                  "instead of --tokens");
  cmd->add_option("--k", a->k, "keys [..., Hkv, S, D] or (S, D) (.npy)");
  cmd->add_option("--v", a->v, "values [..., Hkv, S, Dv] or (S, Dv) (.npy)");
  cmd->add_option("--mask", a->mask,
                  "bool (true = may attend) or additive mask broadcastable to [..., Hq, N, S] "
                  "(.npy); with --tokens, to [heads, words, words], e.g. one bool per word");
  cmd->add_option("--png", a->png,
                  "also draw the weights to this PNG file, one panel per head (with --model a "
                  "grid, layers x heads)");
  cmd->add_flag("--no-color", a->no_color, "shade the terminal heatmap with characters, not colour");
  cmd->add_option("--model", a->model.model_dir,
                  "explain a trained model instead: the --out directory of qkv train");
  cmd->add_option("--prompt", a->model.prompt,
                  "with --model: the text to run it on, at most its context in tokens (characters for "
                  "qkv's own models)");
  cmd->add_option("--html", a->model.html,
                  "with --model: write a self-contained page (hover a token to see what it "
                  "attends to in every layer and head)");
  cmd->add_option("--layer", a->model.layer, "with --model: show this layer only (from 0)");
  cmd->add_option("--head", a->model.head, "with --model: show this head only (from 0)");
  // Whole numbers here; their ranges are checked as the command runs
  // (--layer and --head against the model).
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();
  check_counts<int64_t>(cmd, {{"--d-model", kAny, "a positive integer"},
                              {"--heads", kAny, "a positive integer"},
                              {"--d-k", kAny, "a positive integer"},
                              {"--kv-heads", kAny, "a divisor of --heads"},
                              {"--layer", kAny, "a layer number (from 0)"},
                              {"--head", kAny, "a head number (from 0)"}});
  check_integers<int64_t>(cmd, {"--seed"});
  cmd->add_option("--weights-npy", a->model.weights_npy,
                  "with --model: save the weights shown, [layers, heads, T, T] float32 (.npy)");
  add_model_threads(cmd, a->model.threads);
  path_options(cmd, {.reads = {"--q", "--k", "--v", "--mask"},
                     .read_dirs = {"--model"},
                     .writes = {"--png", "--html", "--weights-npy"}});
  return [a, cmd] { return run_explain(*a, *cmd); };
}

}  // namespace qkv::cli
