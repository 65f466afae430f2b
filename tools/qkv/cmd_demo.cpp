// qkv demo: the self-attention lesson (lessons/self_attention.py), step by
// step, printing the same text as NumPy digit for digit. The random numbers
// come from qkv's re-implementations of NumPy's generators, so W_q, W_k, W_v
// are the very matrices the lesson draws with default_rng(42).
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "print.h"
#include "qkv/attention.h"
#include "qkv/modules.h"
#include "qkv/rng.h"
#include "qkv/softmax.h"

namespace qkv::cli {
namespace {

Tensor normal(NumpyGenerator& rng, int64_t rows, int64_t cols) {
  Tensor t(DType::f64, {rows, cols});
  rng.normal(t.data<double>(), static_cast<size_t>(t.numel()));
  return t;
}

Tensor randn_scaled(NumpyRandomState& rs, int64_t rows, int64_t cols, double divisor) {
  Tensor t(DType::f64, {rows, cols});
  rs.randn(t.data<double>(), static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] /= divisor;
  return t;
}

Tensor map(const Tensor& t, const std::function<double(double)>& f) {
  Tensor out(DType::f64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<double>()[i] = f(t.get(i));
  return out;
}

// m [R, C] -> [C, R]
Tensor transpose(const Tensor& m) {
  const int64_t R = m.dim(0), C = m.dim(1);
  Tensor out(DType::f64, {C, R});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out.data<double>()[c * R + r] = m.get(r * C + c);
  return out;
}

// The lower-triangular "may attend" mask of lesson part 7: [T, T] bool.
Tensor causal_mask(int64_t T) {
  Tensor m(DType::boolean, {T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) m.data<bool>()[i * T + j] = true;
  return m;
}

Tensor masked(const Tensor& scores, const Tensor& mask) {
  Tensor out = map(scores, [](double x) { return x; });
  for (int64_t i = 0; i < out.numel(); ++i)
    if (!mask.data<bool>()[i]) out.data<double>()[i] = -INFINITY;
  return out;
}

// np.allclose(a, b): |a - b| <= atol + rtol * |b| everywhere.
bool allclose(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (!(std::fabs(a.get(i) - b.get(i)) <= 1e-8 + 1e-5 * std::fabs(b.get(i)))) return false;
  return true;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

void print(const std::string& title, const Tensor& t) {
  if (!title.empty()) std::cout << title << "\n";
  std::cout << numpy_str(t) << "\n";
}

int run_demo() {
  std::cout << "== 1. Four tokens, four numbers each ==\n";
  const std::vector<std::string> tokens = {"the", "cat", "sat", "down"};
  const Tensor X = Tensor::from<double>({4, 4}, {1.0, 0.2, 0.0, 0.5,    // the
                                                 0.1, 0.9, 0.3, 0.0,    // cat
                                                 0.0, 0.8, 1.0, 0.2,    // sat
                                                 0.4, 0.0, 0.6, 0.9});  // down
  print("X " + tuple_str(X.shape()), X);

  std::cout << "\n== 2. Queries, keys and values: three projections of X ==\n";
  NumpyGenerator rng(42);
  const int64_t d_k = 3;
  const Tensor W_q = normal(rng, 4, d_k), W_k = normal(rng, 4, d_k), W_v = normal(rng, 4, d_k);
  const Tensor Q = matmul(X, W_q), K = matmul(X, W_k), V = matmul(X, W_v);
  print("W_q", W_q);
  std::cout << "Q " << tuple_str(Q.shape()) << " K " << tuple_str(K.shape()) << " V "
            << tuple_str(V.shape()) << "\n";
  print("Q", Q);

  std::cout << "\n== 3. Scores: every query against every key ==\n";
  const Tensor scores = matmul(Q, transpose(K));
  print("scores = Q @ K.T " + tuple_str(scores.shape()), scores);
  const double sqrt_dk = std::sqrt(static_cast<double>(d_k));
  const Tensor scaled = map(scores, [&](double s) { return s / sqrt_dk; });
  print("scaled = scores / sqrt(d_k), sqrt(3) = " + round4_str(sqrt_dk), scaled);

  std::cout << "\n== 4. Softmax: scores become weights ==\n";
  const Tensor weights = softmax(scaled);
  print("", weights);
  Tensor row_sums(DType::f64, {4});
  for (int64_t i = 0; i < 16; ++i) row_sums.data<double>()[i / 4] += weights.get(i);
  std::cout << "row sums: " << numpy_str(row_sums) << "\n";
  for (int64_t i = 0; i < 4; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < 4; ++j)
      if (weights.get(i * 4 + j) > weights.get(i * 4 + best)) best = j;
    std::string tok = tokens[i];
    tok.resize(5, ' ');
    std::cout << tok << " attends most to '" << tokens[best] << "' ("
              << fmt("%.0f", 100.0 * weights.get(i * 4 + best)) << "%)\n";
  }

  std::cout << "\n== 5. Output: a weighted average of the values ==\n";
  const Tensor output = matmul(weights, V);
  print("", output);
  // The one-formula path: qkv::attention on one head, [Hq=1, N=4, D=3].
  const Tensor fused = attention(Q.reshaped({1, 4, 3}), K.reshaped({1, 4, 3}),
                                 V.reshaped({1, 4, 3})).out;
  std::cout << "attention(Q, K, V) matches the step-by-step result: "
            << (allclose(fused, output) ? "True" : "False") << "\n";

  std::cout << "\n== 6. Why divide by sqrt(d_k)? ==\n";
  std::cout << "d_k   std(q.k)   std(q.k / sqrt(d_k))   (1000 random pairs each)\n";
  for (int64_t d : {4, 64, 1024}) {
    const Tensor q = normal(rng, 1000, d), k = normal(rng, 1000, d);
    std::vector<double> dots(1000);
    double mean = 0.0;
    for (int64_t p = 0; p < 1000; ++p) {
      for (int64_t e = 0; e < d; ++e) dots[p] += q.get(p * d + e) * k.get(p * d + e);
      mean += dots[p] / 1000.0;
    }
    double var = 0.0;
    for (double x : dots) var += (x - mean) * (x - mean) / 1000.0;
    const double sd = std::sqrt(var), sd_scaled = sd / std::sqrt(static_cast<double>(d));
    std::string dd = std::to_string(d);
    dd.resize(5, ' ');
    std::cout << dd << " " << fmt("%8.2f", sd) << "   " << fmt("%8.2f", sd_scaled) << "\n";
  }

  std::cout << "\n== 7. Causal mask: no peeking at later tokens ==\n";
  const Tensor mask = causal_mask(4);
  std::cout << numpy_int_str(mask) << "\n";
  const Tensor masked_scores = masked(scaled, mask);
  print("", masked_scores);
  print("", softmax(masked_scores));

  std::cout << "\n== 8. Multi-head attention: split, attend, concatenate, project ==\n";
  const int64_t n_tokens = 5, d_model = 8, n_heads = 2, d_head = d_model / n_heads;
  const Tensor X5 = normal(rng, n_tokens, d_model);
  MultiHeadAttention mha;
  mha.heads = mha.kv_heads = n_heads;
  mha.head_dim = d_head;
  for (Linear* w : {&mha.wq, &mha.wk, &mha.wv, &mha.wo}) w->weight = normal(rng, d_model, d_model);
  const Tensor out5 = mha.forward(X5, X5);
  std::cout << "input " << tuple_str(X5.shape()) << " -> heads "
            << tuple_str({n_heads, n_tokens, d_head}) << " -> concat "
            << tuple_str({n_tokens, n_heads * d_head}) << " -> output " << tuple_str(out5.shape())
            << "\n";

  std::cout << "\n== 9. Lesson 5: one causal head, np.random.seed(0) ==\n";
  NumpyRandomState legacy(0);
  const int64_t T = 4, d = 8;
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  const Tensor x = randn_scaled(legacy, T, d, 1.0);
  const Tensor W_query = randn_scaled(legacy, d, d, sqrt_d);
  const Tensor W_key = randn_scaled(legacy, d, d, sqrt_d);
  const Tensor W_value = randn_scaled(legacy, d, d, sqrt_d);
  const Tensor q = matmul(x, W_query), k = matmul(x, W_key), v = matmul(x, W_value);
  const Tensor wei_scores = map(matmul(q, transpose(k)), [&](double s) { return s / sqrt_d; });
  const Tensor wei = softmax(masked(wei_scores, causal_mask(T)));
  print("causal weights, rounded to 2 decimals",
        map(wei, [](double w) { return std::nearbyint(w * 100.0) / 100.0; }));
  const Tensor out = matmul(wei, v);
  std::cout << "out " << tuple_str(out.shape()) << "\n";
  Tensor last(DType::f64, {d});
  for (int64_t e = 0; e < d; ++e) last.data<double>()[e] = out.get((T - 1) * d + e);
  std::cout << numpy_str(last) << "\n";

  std::cout << "\nNext: qkv explain --tokens \"the cat sat down\" --heads 2 --png attention.png\n";
  return 0;
}

}  // namespace

Runner add_demo(CLI::App& app) {
  app.add_subcommand("demo",
                     "The self-attention lesson step by step, with the same numbers as its "
                     "NumPy version (lessons/self_attention.py).");
  return [] { return run_demo(); };
}

}  // namespace qkv::cli
