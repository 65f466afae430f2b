// The masks real models use (issue #3), in the reference path: sliding
// window, per-batch key lengths, ALiBi and logit soft-capping. As in
// test_attention_ref.cpp, q = 0 makes every visible key weigh the same, so
// the output (values = key index) reveals exactly which keys a query saw.
#include <cmath>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "qkv/attention.h"

using namespace qkv;
using ::testing::HasSubstr;

namespace {

Tensor random_tensor(Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  Tensor t(DType::f64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = nd(gen);
  return t;
}

Tensor index_values(Shape lead_heads, int64_t S) {
  Shape shape = lead_heads;
  shape.insert(shape.end(), {S, 1});
  Tensor v(DType::f64, shape);
  for (int64_t i = 0; i < v.numel(); ++i) v.data<double>()[i] = static_cast<double>(i % S);
  return v;
}

// Mean of the integers first..last, or 0 for an empty range.
double mean_index(int64_t first, int64_t last) {
  return first > last ? 0.0 : (first + last) / 2.0;
}

}  // namespace

struct WindowCase { int64_t N, S; Causal c; int64_t left, right; };

class Window : public ::testing::TestWithParam<WindowCase> {};

TEST_P(Window, QueryISeesItsWindow) {
  const auto [N, S, c, left, right] = GetParam();
  Tensor q(DType::f64, {1, N, 2});
  AttentionOptions o;
  o.causal = c;
  o.window = SlidingWindow{left, right};
  Tensor out = attention(q, random_tensor({1, S, 2}, 1), index_values({1}, S), o).out;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = c == Causal::bottom_right ? i + S - N : i;  // the diagonal
    int64_t first = left < 0 ? 0 : std::max<int64_t>(0, a - left);
    int64_t last = S - 1;
    if (c != Causal::none) last = std::min(last, a);
    if (right >= 0) last = std::min(last, a + right);
    EXPECT_NEAR(out.get(i), mean_index(first, last), 1e-12) << "row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Alignments, Window,
    ::testing::Values(WindowCase{6, 6, Causal::top_left, 2, -1}, WindowCase{6, 6, Causal::none, 1, 1},
                      WindowCase{4, 9, Causal::bottom_right, 3, 0}, WindowCase{4, 9, Causal::none, 0, 2},
                      WindowCase{9, 4, Causal::bottom_right, 1, -1}, WindowCase{9, 4, Causal::top_left, 0, 0},
                      WindowCase{5, 5, Causal::none, -1, 0}));

TEST(KeyLengths, PaddingIsNeverVisible) {
  // Leading dims [2, 3] flatten to 6 batch elements, each with its length.
  const int64_t S = 7;
  Tensor q(DType::f64, {2, 3, 2, 3, 4});
  AttentionOptions o;
  o.key_lengths = {7, 1, 4, 0, 3, 5};
  o.causal = Causal::bottom_right;
  o.return_lse = true;
  auto r = attention(q, random_tensor({2, 3, 1, S, 4}, 2), index_values({2, 3, 1}, S), o);
  for (int64_t b = 0; b < 6; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 3; ++i) {
        const int64_t last = std::min(o.key_lengths[b] - 1, i + S - 3);
        const int64_t row = (b * 2 + h) * 3 + i;
        EXPECT_NEAR(r.out.get(row), mean_index(0, last), 1e-12) << b << " " << i;
        if (last < 0) {
          EXPECT_EQ(r.lse.get(row), -INFINITY);
        }
      }
}

TEST(Alibi, EqualsTheSameBiasAsAFloatMask) {
  const int64_t Hq = 4, N = 3, S = 6;
  Tensor q = random_tensor({Hq, N, 8}, 3), k = random_tensor({2, S, 8}, 4), v = random_tensor({2, S, 5}, 5);
  AttentionOptions a;
  a.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  a.causal = Causal::bottom_right;
  Tensor bias(DType::f64, {Hq, N, S});
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < S; ++j)
        bias.data<double>()[(h * N + i) * S + j] = -a.alibi_slopes[h] * std::fabs(double(i + S - N - j));
  AttentionOptions m;
  m.mask = bias;
  m.causal = Causal::bottom_right;
  Tensor oa = attention(q, k, v, a).out, om = attention(q, k, v, m).out;
  for (int64_t i = 0; i < oa.numel(); ++i) EXPECT_NEAR(oa.get(i), om.get(i), 1e-14);
  Tensor plain = attention(q, k, v).out;
  EXPECT_GT(std::fabs(plain.get(0) - oa.get(0)), 1e-6);
}

TEST(Softcap, CapsScoresBeforeTheMask) {
  Tensor q = random_tensor({1, 2, 4}, 6), k = random_tensor({1, 5, 4}, 7), v = random_tensor({1, 5, 3}, 8);
  for (int64_t i = 0; i < q.numel(); ++i) q.data<double>()[i] *= 10.0;  // big scores, so the cap bites
  Tensor mask = Tensor::from<double>({5}, {0.0, 1.5, -INFINITY, 0.0, -0.5});
  AttentionOptions o;
  o.softcap = 2.0;
  o.mask = mask;
  o.return_weights = true;
  auto r = attention(q, k, v, o);
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<double> s(5);
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < 5; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < 4; ++d) dot += q.get(i * 4 + d) * k.get(j * 4 + d);
      s[j] = 2.0 * std::tanh(dot * 0.5 / 2.0) + mask.get(j);
      m = std::fmax(m, s[j]);
    }
    for (double x : s) sum += std::exp(x - m);
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_NEAR(r.weights.get(i * 5 + j), std::exp(s[j] - m) / sum, 1e-14);
  }
}

TEST(MaskOptions, RejectBadValues) {
  Tensor q(DType::f32, {2, 1, 3, 4}), k(DType::f32, {2, 1, 5, 4}), v(DType::f32, {2, 1, 5, 4});
  auto expect_error = [&](const AttentionOptions& o, const char* msg) {
    try {
      attention(q, k, v, o);
      ADD_FAILURE() << "no error, expected " << msg;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(msg));
    }
  };
  AttentionOptions o;
  o.key_lengths = {5};
  expect_error(o, "key_lengths: expected one length per batch element (2");
  o.key_lengths = {5, 6};
  expect_error(o, "key_lengths: expected lengths in [0, S=5], found 6 at [1]");
  AttentionOptions a;
  a.alibi_slopes = {1.0, 2.0};
  expect_error(a, "alibi_slopes: expected one slope per query head (Hq = 1), found 2");
  a.alibi_slopes = {NAN};
  expect_error(a, "alibi_slopes: expected finite slopes");
  AttentionOptions w;
  w.window = SlidingWindow{-2, 0};
  expect_error(w, "window: expected sizes >= 0");
  AttentionOptions c;
  c.softcap = -1.0;
  expect_error(c, "softcap: expected 0 (off) or a positive number");
}

// The names are read in one place, the library; an unknown one is refused
// naming the field and every accepted name, as the command line and the
// Python package show it.
TEST(OptionNames, ParseOrNameTheChoices) {
  for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
    EXPECT_EQ(parse_causal(causal_name(c)), c);
  for (Kernel k : {Kernel::reference, Kernel::fast, Kernel::automatic})
    EXPECT_EQ(parse_kernel(kernel_name(k)), k);
  auto message = [](auto parse, const char* s) -> std::string {
    try {
      parse(s);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(parse_causal, "diagonal"),
            "causal: expected none, top-left or bottom-right, found 'diagonal'");
  EXPECT_EQ(message(parse_kernel, "Fast"), "kernel: expected reference, fast or auto, found 'Fast'");
}
