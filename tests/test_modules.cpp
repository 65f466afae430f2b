// test_modules.cpp: matmul, Linear, Head and MultiHeadAttention against hand
// results and a direct loop computation of the lesson formulas.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/modules.h"
#include "qkv/rng.h"

using ::testing::HasSubstr;

namespace qkv {
namespace {

Tensor randn(Shape shape, NumpyGenerator& rng) {
  Tensor t(DType::f64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.standard_normal();
  return t;
}

void expect_near(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.get(i), b.get(i), tol) << "at " << i;
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected qkv::Error containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// A direct multi-head attention over one batch entry, loops only:
// q [N, Hq*Dh], k, v [S, Hkv*Dh] (already projected) -> [N, Hq*Dh] merged heads.
std::vector<double> direct_heads(const Tensor& q, const Tensor& k, const Tensor& v, int64_t b,
                                 int64_t N, int64_t S, int64_t Hq, int64_t Hkv, int64_t Dh,
                                 bool causal) {
  std::vector<double> out(N * Hq * Dh, 0.0);
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t g = h / (Hq / Hkv);
    for (int64_t i = 0; i < N; ++i) {
      std::vector<double> s(S);
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < Dh; ++d)
          dot += q.get(((b * N + i) * Hq + h) * Dh + d) * k.get(((b * S + j) * Hkv + g) * Dh + d);
        s[j] = (causal && j > i) ? -INFINITY : dot / std::sqrt(static_cast<double>(Dh));
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j < S; ++j) sum += (s[j] = std::exp(s[j] - m));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t d = 0; d < Dh; ++d)
          out[(i * Hq + h) * Dh + d] += s[j] / sum * v.get(((b * S + j) * Hkv + g) * Dh + d);
    }
  }
  return out;
}

TEST(Matmul, HandComputed) {
  const Tensor a = Tensor::from<double>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = Tensor::from<double>({3, 2}, {7, 8, 9, 10, 11, 12});
  expect_near(matmul(a, b), Tensor::from<double>({2, 2}, {58, 64, 139, 154}), 0.0);
  // Leading dims are batch; a 1-D a is one row, as in NumPy.
  expect_near(matmul(a.reshaped({2, 1, 3}), b), Tensor::from<double>({2, 1, 2}, {58, 64, 139, 154}), 0.0);
  expect_near(matmul(Tensor::from<double>({3}, {1, 0, -1}), b), Tensor::from<double>({2}, {-4, -4}), 0.0);
}

TEST(Matmul, OutputHasTheInputDtype) {
  const Tensor a = Tensor::from<float>({1, 2}, {0.5f, 2.0f});
  const Tensor b = Tensor::from<double>({2, 1}, {4.0, 0.25});
  const Tensor y = matmul(a, b);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(y.data<float>()[0], 2.5f);
}

TEST(Matmul, Errors) {
  const Tensor b = Tensor(DType::f64, {8, 4});
  expect_error([&] { matmul(Tensor(DType::f64, {3, 5}), b); },
               "matmul: expected a's last dim K = 8 (b [8, 4]), found 5 in shape [3, 5]");
  expect_error([&] { matmul(Tensor(DType::f64, {3, 8}), Tensor(DType::f64, {8})); },
               "expected b [K, P] with 2 dims, found [8]");
  expect_error([&] { matmul(Tensor(DType::f64, {}), b); }, "at least 1 dim, found []");
  expect_error([&] { matmul(Tensor(DType::boolean, {3, 8}), b); },
               "matmul: a: expected float32 or float64, found bool");
}

TEST(Linear, ForwardWithBias) {
  Linear lin;
  lin.weight = Tensor::from<double>({2, 3}, {1, 0, 2, 0, 1, -1});
  lin.bias = Tensor::from<double>({3}, {0.5, 0, 1});
  // [1, 2]·W = [1, 2, 0]; [3, -1]·W = [3, -1, 7]; then + b.
  const Tensor x = Tensor::from<double>({2, 2}, {1, 2, 3, -1});
  expect_near(lin.forward(x), Tensor::from<double>({2, 3}, {1.5, 2, 1, 3.5, -1, 8}), 0.0);
  lin.bias = Tensor();
  expect_near(lin.forward(x), Tensor::from<double>({2, 3}, {1, 2, 0, 3, -1, 7}), 0.0);
}

TEST(Linear, InitIsDeterministicAndScaled) {
  NumpyGenerator r1(1234), r2(1234), r3(1235), direct(1234);
  const Linear a = Linear::init(8, 4, true, r1), b = Linear::init(8, 4, true, r2);
  const Linear c = Linear::init(8, 4, false, r3);
  ASSERT_EQ(a.weight.shape(), (Shape{8, 4}));
  EXPECT_EQ(a.weight.dtype(), DType::f64);
  expect_near(a.weight, b.weight, 0.0);
  // C order: the k-th draw is weight[k / out, k % out], divided by sqrt(in).
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(a.weight.get(i), direct.standard_normal() / std::sqrt(8.0));
  EXPECT_NE(a.weight.get(0), c.weight.get(0));
  ASSERT_EQ(a.bias.shape(), (Shape{4}));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(a.bias.get(i), 0.0);
  EXPECT_TRUE(c.bias.empty());
}

TEST(Linear, Errors) {
  NumpyGenerator rng(0);
  Linear lin = Linear::init(8, 4, false, rng);
  expect_error([&] { lin.forward(Tensor(DType::f64, {3, 5})); },
               "linear: expected input last dim 8 (weight [8, 4]), found 5 in shape [3, 5]");
  lin.bias = Tensor(DType::f64, {3});
  expect_error([&] { lin.forward(Tensor(DType::f64, {3, 8})); },
               "linear: expected bias [4] (weight [8, 4]), found [3]");
  expect_error([&] { Linear::init(0, 4, false, rng); }, "linear: in and out must be at least 1");
  lin.weight = Tensor(DType::f64, {8});
  expect_error([&] { lin.forward(Tensor(DType::f64, {3, 8})); },
               "linear: expected weight [in, out] with 2 dims, found [8]");
}

TEST(Head, MatchesTheLessonFormula) {
  NumpyGenerator rng(5);
  const int64_t T = 4, C = 8, Dh = 8;
  const Head head = Head::init(C, Dh, rng);
  const Tensor x = randn({2, T, C}, rng);
  Tensor w;
  const Tensor out = head.forward(x, &w);
  ASSERT_EQ(out.shape(), (Shape{2, T, Dh}));
  ASSERT_EQ(w.shape(), (Shape{2, T, T}));
  const Tensor q = head.query.forward(x), k = head.key.forward(x), v = head.value.forward(x);
  for (int64_t b = 0; b < 2; ++b) {
    const std::vector<double> want = direct_heads(q, k, v, b, T, T, 1, 1, Dh, true);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out.get(b * T * Dh + i), want[i], 1e-12);
  }
  // Causal: nothing above the diagonal, and row 0 sees only itself.
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) EXPECT_EQ(w.get(i * T + j), 0.0);
  EXPECT_EQ(w.get(0), 1.0);
}

TEST(Head, Errors) {
  NumpyGenerator rng(0);
  expect_error([&] { Head::init(0, 4, rng); }, "head: C and Dh must be at least 1");
  const Head head = Head::init(8, 4, rng);
  expect_error([&] { head.forward(Tensor(DType::f64, {8})); },
               "head: x: expected [..., T, C] with C = 8, found shape [8]");
  expect_error([&] { head.forward(Tensor(DType::f64, {3, 5})); }, "with C = 8, found shape [3, 5]");
}

TEST(MultiHeadAttention, OneHeadWithIdentityOutputEqualsHead) {
  NumpyGenerator rng(11);
  const int64_t T = 5, C = 6, Dh = 4;
  const Head head = Head::init(C, Dh, rng);
  MultiHeadAttention mha;
  mha.heads = mha.kv_heads = 1;
  mha.head_dim = Dh;
  mha.wq = head.query, mha.wk = head.key, mha.wv = head.value;
  mha.wo.weight = Tensor(DType::f64, {Dh, Dh});
  for (int64_t i = 0; i < Dh; ++i) mha.wo.weight.data<double>()[i * Dh + i] = 1.0;
  const Tensor x = randn({3, T, C}, rng);
  AttentionOptions opts;
  opts.causal = Causal::top_left;
  Tensor w_mha, w_head;
  const Tensor got = mha.forward(x, x, opts, &w_mha);
  expect_near(got, head.forward(x, &w_head), 1e-14);
  expect_near(w_mha.reshaped({3, T, T}), w_head, 0.0);
}

TEST(MultiHeadAttention, GqaEqualsMhaWithRepeatedKeyValueWeights) {
  NumpyGenerator rng(21);
  const int64_t C = 12, Hq = 6, Hkv = 2, Dh = C / Hq, group = Hq / Hkv;
  const MultiHeadAttention gqa = MultiHeadAttention::init(C, Hq, Hkv, rng, true);
  ASSERT_EQ(gqa.wk.weight.shape(), (Shape{C, Hkv * Dh}));
  // Full MHA: query head h gets a copy of K/V head h / group's columns.
  MultiHeadAttention full = gqa;
  full.kv_heads = Hq;
  auto repeat = [&](const Linear& src) {
    Linear dst;
    dst.weight = Tensor(DType::f64, {C, Hq * Dh});
    dst.bias = Tensor(DType::f64, {Hq * Dh});
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t d = 0; d < Dh; ++d) {
        const int64_t from = (h / group) * Dh + d, to = h * Dh + d;
        for (int64_t c = 0; c < C; ++c)
          dst.weight.data<double>()[c * Hq * Dh + to] = src.weight.get(c * Hkv * Dh + from);
        dst.bias.data<double>()[to] = 0.1 * static_cast<double>(from);
      }
    return dst;
  };
  full.wk = repeat(gqa.wk), full.wv = repeat(gqa.wv);
  MultiHeadAttention gqa_b = gqa;  // the same non-zero biases, unrepeated
  for (int64_t i = 0; i < Hkv * Dh; ++i)
    gqa_b.wk.bias.data<double>()[i] = gqa_b.wv.bias.data<double>()[i] = 0.1 * static_cast<double>(i);
  const Tensor x = randn({2, 7, C}, rng);
  for (Causal causal : {Causal::none, Causal::top_left}) {
    AttentionOptions opts;
    opts.causal = causal;
    Tensor w_gqa, w_full;
    expect_near(gqa_b.forward(x, x, opts, &w_gqa), full.forward(x, x, opts, &w_full), 1e-12);
    expect_near(w_gqa, w_full, 1e-12);
  }
}

TEST(MultiHeadAttention, CrossAttentionMatchesDirectComputation) {
  NumpyGenerator rng(3);
  const int64_t B = 2, N = 3, S = 5, C = 8, Hq = 4, Hkv = 2, Dh = 2;
  MultiHeadAttention mha = MultiHeadAttention::init(C, Hq, Hkv, rng, true);
  mha.wo.bias = randn({C}, rng);
  const Tensor xq = randn({B, N, C}, rng), xkv = randn({B, S, C}, rng);
  Tensor w;
  const Tensor out = mha.forward(xq, xkv, {}, &w);
  ASSERT_EQ(out.shape(), (Shape{B, N, C}));
  ASSERT_EQ(w.shape(), (Shape{B, Hq, N, S}));
  const Tensor q = mha.wq.forward(xq), k = mha.wk.forward(xkv), v = mha.wv.forward(xkv);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> merged = direct_heads(q, k, v, b, N, S, Hq, Hkv, Dh, false);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c) {
        double want = mha.wo.bias.get(c);
        for (int64_t e = 0; e < Hq * Dh; ++e) want += merged[i * Hq * Dh + e] * mha.wo.weight.get(e * C + c);
        EXPECT_NEAR(out.get((b * N + i) * C + c), want, 1e-12);
      }
  }
  // A float32 input with float64 weights stays float32 end to end.
  const Tensor out32 = mha.forward(xq.to(DType::f32), xkv.to(DType::f32));
  EXPECT_EQ(out32.dtype(), DType::f32);
  expect_near(out32, out, 1e-5);
}

TEST(MultiHeadAttention, Errors) {
  NumpyGenerator rng(0);
  expect_error([&] { MultiHeadAttention::init(10, 3, 1, rng); },
               "mha: model width C = 10 must be a positive multiple of heads = 3");
  expect_error([&] { MultiHeadAttention::init(12, 4, 3, rng); },
               "mha: heads = 4 must be a multiple of kv_heads = 3");
  expect_error([&] { MultiHeadAttention::init(12, 0, 1, rng); },
               "mha: heads and kv_heads must be at least 1");
  MultiHeadAttention mha = MultiHeadAttention::init(8, 4, 2, rng);
  const Tensor x = Tensor(DType::f64, {2, 3, 8});
  expect_error([&] { mha.forward(Tensor(DType::f64, {2, 3, 6}), x); },
               "mha: x_q: expected [..., N, C] with C = 8, found shape [2, 3, 6]");
  expect_error([&] { mha.forward(x, Tensor(DType::f64, {5, 8})); },
               "mha: x_q, x_kv: expected the same leading dims, found x_q [2, 3, 8] and x_kv [5, 8]");
  mha.heads = 2;  // a hand-built module whose weights no longer fit
  expect_error([&] { mha.forward(x, x); }, "mha: wq: expected weight [C, Hq*Dh = 4], found [8, 8]");
}

}  // namespace
}  // namespace qkv
