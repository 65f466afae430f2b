// qkv demo: the two seed lessons, "Self-attention from scratch" (sections 2.2
// to 2.5, then its practice tasks) and lesson 5 of the LLM course, printing
// every number they print from their own inputs and random streams. NumPy's
// generators are re-implemented bit for bit in qkv/rng.h, so W_q, W_k, W_v are
// the very matrices the lessons draw, and arrays are printed the way NumPy
// prints them (tests/numpy/test_demo.py reads the expected numbers from the
// lesson texts themselves).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "demo_lesson.h"
#include "demo_maths.h"
#include "qkv/attention.h"
#include "qkv/modules.h"

namespace qkv::cli {
namespace demo {
namespace {

void section_2_2(Lesson2& l, const Printer& p) {
  l.tokens = {"the", "cat", "sat", "down"};
  l.X = lesson2_x();
  p.line("Four tokens, each already an embedding of d_model = 4 numbers: X " +
         tuple_str(l.X.shape()));
  p.array(l.X);
  l.W_q = normal(l.rng, {4, 3});
  l.W_k = normal(l.rng, {4, 3});
  l.W_v = normal(l.rng, {4, 3});
  l.Q = matmul(l.X, l.W_q), l.K = matmul(l.X, l.W_k), l.V = matmul(l.X, l.W_v);
  p.line("W_q, W_k, W_v (4 x 3, d_k = 3) drawn from np.random.default_rng(42); the shapes of "
         "Q = X W_q, K = X W_k, V = X W_v:");
  p.line(tuple_str(l.Q.shape()) + " " + tuple_str(l.K.shape()) + " " + tuple_str(l.V.shape()));

  p.line("Step 1: scores = Q Kᵀ, one dot product per (query token, key token):");
  const Tensor scores = matmul(l.Q, transpose(l.K));
  p.array(scores);

  const double sqrt_dk = std::sqrt(3.0);
  l.scaled = map(scores, [&](double s) { return s / sqrt_dk; });
  l.weights = softmax_rows(l.scaled);
  p.line("Steps 2 and 3: weights = softmax(scores / √d_k) by rows, then each row's sum:");
  p.array(l.weights);
  p.array(row_sums(l.weights));

  p.line("Step 4: out = weights V, the shape of out, and the key each token weighs most:");
  const Tensor out = matmul(l.weights, l.V);
  p.line(tuple_str(out.shape()));
  for (int64_t i = 0; i < 4; ++i) {
    std::string token = l.tokens[static_cast<size_t>(i)];
    token.resize(std::max<size_t>(token.size(), 5), ' ');  // Python's f"{t:5}"
    const int64_t best = row_argmax(l.weights, i);
    p.line(token + " attends most to '" + l.tokens[static_cast<size_t>(best)] + "' (" +
           p.percent(l.weights.get(i * 4 + best)) + ")");
  }

  // The one-formula version is qkv's own attention on one head [1, N, D].
  AttentionOptions opts;
  opts.kernel = Kernel::reference;
  const Tensor fused = attention(l.Q.reshaped({1, 4, 3}), l.K.reshaped({1, 4, 3}),
                                 l.V.reshaped({1, 4, 3}), opts).out;
  p.line("The one formula, attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, equals out (np.allclose):");
  p.line(allclose(fused, out) ? "True" : "False");
}

void section_2_3(Lesson2& l, const Printer& p) {
  p.line("For each d, 1000 random pairs (q, k) drawn where 2.2 left default_rng(42); the spread "
         "of q·k, before and after dividing by √d:");
  for (const int64_t d : {4, 64, 1024}) {
    const Tensor q = normal(l.rng, {1000, d}), k = normal(l.rng, {1000, d});
    Tensor dots(DType::f64, {1000});
    std::vector<double> prod(static_cast<size_t>(d));
    for (int64_t i = 0; i < 1000; ++i) {
      for (int64_t e = 0; e < d; ++e)
        prod[static_cast<size_t>(e)] = q.get(i * d + e) * k.get(i * d + e);
      dots.data<double>()[i] = pairwise_sum(prod.data(), d);  // (q * k).sum(axis=1)
    }
    const double sqrt_d = std::sqrt(static_cast<double>(d));
    const Tensor dots_scaled = map(dots, [&](double x) { return x / sqrt_d; });
    p.line("d=" + fixed_str(static_cast<double>(d), 0, 5) + "  std of q·k = " +
           p.fixed(numpy_std(dots), 1, 6) + "   after /√d = " + p.fixed(numpy_std(dots_scaled), 2));
  }
  p.line("The raw spread grows like √d; scaled, it stays near 1 and softmax stays soft.");
}

void section_2_4(Lesson2& l, const Printer& p) {
  const Tensor causal = causal_mask(4);
  p.line("The causal mask (1 = may attend: itself and earlier tokens), then the weights with "
         "every later token's score set to -inf:");
  p.ints(causal);
  p.array(softmax_rows(where_allowed(causal, l.scaled)));
}

void section_2_5(Lesson2& l, const Printer& p) {
  const int64_t n = 5, d_model = 8, n_heads = 2;
  const Tensor X8 = normal(l.rng, {n, d_model});
  MultiHeadAttention mha;
  mha.heads = mha.kv_heads = n_heads;
  mha.head_dim = d_model / n_heads;
  // W_q, W_k, W_v, W_o in that order, each N(0, 1/d_model) like the lesson's.
  for (Linear* w : {&mha.wq, &mha.wk, &mha.wv, &mha.wo})
    w->weight = normal(l.rng, {d_model, d_model}, std::pow(static_cast<double>(d_model), -0.5));
  AttentionOptions opts;
  opts.causal = Causal::top_left;
  const Tensor Y = mha.forward(X8, X8, opts);
  p.line("Five more tokens X8 (d_model = 8) from the same generator, through 2 causal heads of "
         "d_head = 4, concatenated and mixed by W_o; input shape → output shape:");
  p.line(tuple_str(X8.shape()) + " → " + tuple_str(Y.shape()));
}

// The lesson's table of real sizes, with d_head computed rather than copied,
// and the key/value heads each model publishes: with GQA the KV cache keeps
// only kv_heads heads per layer.
void section_sizes(Lesson2&, const Printer& p) {
  struct Model { const char* name; int64_t d_model, heads, layers, kv_heads; };
  const Model models[] = {{"BERT-base", 768, 12, 12, 12},
                          {"GPT-2 small", 768, 12, 12, 12},
                          {"Llama 3 8B", 4096, 32, 32, 8},
                          {"Llama 3 70B", 8192, 64, 80, 8}};
  auto pad = [](std::string s, size_t w, bool left) {
    while (s.size() < w) s = left ? s + " " : " " + s;
    return s;
  };
  p.line(pad("Model", 12, true) + pad("d_model", 8, false) + pad("Heads", 7, false) +
         pad("d_head", 8, false) + pad("Layers", 8, false) + pad("KV heads", 10, false) +
         "   KV cache per token (16-bit)");
  for (const Model& m : models) {
    const int64_t d_head = m.d_model / m.heads;
    // K and V, every layer, 2 bytes per number.
    auto kib = [&](int64_t heads) {
      return std::to_string(2 * m.layers * heads * d_head * 2 / 1024);
    };
    std::string cache = kib(m.kv_heads) + " KiB";
    if (m.kv_heads != m.heads) cache += " (" + kib(m.heads) + " KiB without GQA)";
    p.line(pad(m.name, 12, true) + pad(std::to_string(m.d_model), 8, false) +
           pad(std::to_string(m.heads), 7, false) + pad(std::to_string(d_head), 8, false) +
           pad(std::to_string(m.layers), 8, false) + pad(std::to_string(m.kv_heads), 10, false) +
           "   " + cache);
  }
}

void section_lesson5(Lesson2&, const Printer& p) {
  NumpyRandomState rs(0);
  const int64_t T = 4, d = 8;
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  const Tensor x = randn(rs, {T, d});
  Tensor W[3];  // Wq, Wk, Wv: randn(d, d) / √d, drawn in that order
  for (Tensor& w : W) w = map(randn(rs, {d, d}), [&](double v) { return v / sqrt_d; });
  const Tensor Q = matmul(x, W[0]), K = matmul(x, W[1]), V = matmul(x, W[2]);
  const Tensor scores = map(matmul(Q, transpose(K)), [&](double s) { return s / sqrt_d; });
  const Tensor weights = softmax_rows(where_allowed(causal_mask(T), scores));
  const Tensor out = matmul(weights, V);
  const double f = std::pow(10.0, p.precision);  // np.round: rint(x * 10^P) / 10^P
  p.line("np.random.seed(0): x = randn(4, 8), Wq, Wk, Wv = randn(8, 8) / √8, causal weights "
         "rounded to " + std::to_string(p.precision) + " decimals, then the shape of out:");
  p.array(map(weights, [&](double w) { return std::nearbyint(w * f) / f; }));
  p.line(tuple_str(out.shape()));

  // The lesson's PyTorch Head(d_model=32, d_head=16) on 2 sequences of 10
  // tokens. PyTorch's random numbers are not NumPy's, so only the shape is
  // the lesson's; qkv::Head draws its weights from default_rng(0).
  NumpyGenerator rng(0);
  const Tensor xb = normal(rng, {2, 10, 32});
  const Head head = Head::init(32, 16, rng);
  const Tensor y = head.forward(xb);
  std::string dims;
  for (int64_t s : y.shape()) dims += (dims.empty() ? "" : ", ") + std::to_string(s);
  p.line("The same head as a module, qkv::Head(C = 32, Dh = 16), on 2 sequences of 10 tokens "
         "(x " + tuple_str(xb.shape()) + "):");
  p.line("torch.Size([" + dims + "])");
}

struct Section {
  const char* name;
  const char* heading;
  void (*run)(Lesson2&, const Printer&);
};

// In the lessons' order; each part starts where the previous one left the
// random stream.
const Section kSections[] = {
    {"2.2", "Self-attention from scratch, 2.2: step by step on \"the cat sat down\"", section_2_2},
    {"2.3", "Self-attention from scratch, 2.3: why divide by √d_k", section_2_3},
    {"2.4", "Self-attention from scratch, 2.4: the causal mask", section_2_4},
    {"2.5", "Self-attention from scratch, 2.5: multi-head attention", section_2_5},
    {"sizes", "Self-attention from scratch, 2.5: real model sizes", section_sizes},
    {"lesson5", "LLM course lesson 5: attention on four tokens with NumPy", section_lesson5},
    {"practice-unscaled", "Self-attention from scratch, practice 1: d_k = 16 without √d_k scaling",
     [](Lesson2& l, const Printer& p) { practice_unscaled(l, p); }},
    {"practice-padding", "Self-attention from scratch, practice 2: a padding mask",
     [](Lesson2& l, const Printer& p) { practice_padding(l, p); }},
};

std::string section_names() {
  std::string names;
  for (const Section& s : kSections) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}

constexpr int kMaxPrecision = 12;

struct DemoArgs {
  std::string section;
  int precision = kLessonPrecision;
};

int run_demo(const DemoArgs& a) {
  bool known = a.section.empty();
  for (const Section& s : kSections) known = known || a.section == s.name;
  if (!known)
    throw UsageError("--section: expected one of " + section_names() + ", found '" + a.section +
                     "'");
  // Up to 12 digits qkv prints NumPy's digits; beyond that the last ones can
  // differ, because NumPy's matrix products run through BLAS (fused
  // multiply-adds, its own summation order).
  if (a.precision < kLessonPrecision || a.precision > kMaxPrecision)
    throw UsageError("--precision: expected an integer from 2 (the lessons') to " +
                     std::to_string(kMaxPrecision) + ", found " + std::to_string(a.precision));
  // Every part runs, so that the random stream reaches a later part exactly
  // as it does in the lesson; the parts not asked for print into nothing.
  std::ostream nowhere(nullptr);
  Lesson2 lesson;
  bool first = true;
  for (const Section& s : kSections) {
    const bool shown = a.section.empty() || a.section == s.name;
    std::ostream& out = shown ? std::cout : nowhere;
    if (shown) {
      out << (first ? "" : "\n") << "== " << s.heading << " (--section " << s.name << ") ==\n";
      first = false;
    }
    s.run(lesson, Printer{out, a.precision});
  }
  if (a.section.empty())
    std::cout << "\nNext: qkv explain --tokens \"the cat sat down\" shows every stage for your own "
                 "words.\n";
  return 0;
}

}  // namespace

Tensor lesson2_x() {
  return Tensor::from<double>({4, 4}, {0.1, 0.0, 0.2, 0.0,    // the
                                       0.9, 0.8, 0.1, 0.3,    // cat
                                       0.2, 0.9, 0.7, 0.1,    // sat
                                       0.1, 0.3, 0.9, 0.4});  // down
}

}  // namespace demo

Runner add_demo(CLI::App& app) {
  auto a = std::make_shared<demo::DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "The seed lessons' numbers, digit for digit, from their own inputs and NumPy random "
      "streams: \"Self-attention from scratch\" 2.2-2.5 and its practice tasks, and lesson 5 of "
      "the LLM course.");
  cmd->add_option("--section", a->section,
                  "print one part only: " + demo::section_names());
  cmd->add_option("--precision", a->precision,
                  "digits after the point (2, the lessons', up to 12); the lessons' other "
                  "numbers get as many more")
      ->capture_default_str();
  return [a] { return demo::run_demo(*a); };
}

}  // namespace qkv::cli
