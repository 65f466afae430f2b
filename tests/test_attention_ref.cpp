// The reference attention's semantics, checked by properties that need no
// second implementation: with q = 0 every visible key gets the same weight,
// so the output is the mean of the visible values and reveals exactly which
// keys a query saw.
#include <cmath>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "qkv/attention.h"

using namespace qkv;
using ::testing::HasSubstr;

namespace {

Tensor random_tensor(Shape shape, uint32_t seed, DType dt = DType::f64) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  Tensor t(DType::f64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = nd(gen);
  return t.to(dt);
}

// v[s, 0] = s: the output of a uniform-weight row is the mean visible index.
Tensor index_values(int64_t H, int64_t S) {
  Tensor v(DType::f64, {H, S, 1});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t s = 0; s < S; ++s) v.data<double>()[h * S + s] = static_cast<double>(s);
  return v;
}

// Brute force for one row, straight from the formula (double).
std::vector<double> brute_row(const Tensor& q, const Tensor& k, const Tensor& v, int64_t hq,
                              int64_t hkv, int64_t i, double scale, const std::vector<bool>& vis) {
  const int64_t N = q.dim(-2), S = k.dim(-2), D = q.dim(-1), Dv = v.dim(-1);
  std::vector<double> s(S), out(Dv, 0.0);
  double m = -INFINITY, sum = 0.0;
  for (int64_t j = 0; j < S; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += q.get((hq * N + i) * D + d) * k.get((hkv * S + j) * D + d);
    s[j] = vis[j] ? dot * scale : -INFINITY;
    m = std::fmax(m, s[j]);
  }
  for (int64_t j = 0; j < S; ++j) sum += vis[j] ? std::exp(s[j] - m) : 0.0;
  for (int64_t j = 0; j < S; ++j)
    if (vis[j])
      for (int64_t e = 0; e < Dv; ++e) out[e] += std::exp(s[j] - m) / sum * v.get((hkv * S + j) * Dv + e);
  return out;
}

}  // namespace

TEST(AttentionRef, SingleKeyReturnsItsValue) {
  Tensor q = random_tensor({1, 3, 4}, 1), k = random_tensor({1, 1, 4}, 2), v = random_tensor({1, 1, 5}, 3);
  Tensor out = attention(q, k, v).out;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t e = 0; e < 5; ++e) EXPECT_NEAR(out.get(i * 5 + e), v.get(e), 1e-15);
}

TEST(AttentionRef, MatchesBruteForceCrossAttentionWithScale) {
  // N != S, Dv != D, scale override.
  Tensor q = random_tensor({2, 3, 7}, 4), k = random_tensor({2, 5, 7}, 5), v = random_tensor({2, 5, 2}, 6);
  AttentionOptions o;
  o.scale = 0.37;
  Tensor out = attention(q, k, v, o).out;
  EXPECT_EQ(out.shape(), Shape({2, 3, 2}));
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 3; ++i) {
      auto want = brute_row(q, k, v, h, h, i, 0.37, std::vector<bool>(5, true));
      for (int64_t e = 0; e < 2; ++e) EXPECT_NEAR(out.get((h * 3 + i) * 2 + e), want[e], 1e-14);
    }
}

TEST(AttentionRef, DefaultScaleIsInverseSqrtD) {
  Tensor q = random_tensor({1, 2, 9}, 7), k = random_tensor({1, 4, 9}, 8), v = random_tensor({1, 4, 3}, 9);
  AttentionOptions o;
  o.scale = 1.0 / 3.0;
  Tensor a = attention(q, k, v).out, b = attention(q, k, v, o).out;
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_DOUBLE_EQ(a.get(i), b.get(i));
  o.scale = 1.0;  // "no scaling" differs
  Tensor c = attention(q, k, v, o).out;
  EXPECT_GT(std::fabs(c.get(0) - a.get(0)), 1e-6);
}

struct CausalCase { int64_t N, S; Causal c; };

class CausalAlignment : public ::testing::TestWithParam<CausalCase> {};

TEST_P(CausalAlignment, QueryISeesExactlyTheRightKeys) {
  const auto [N, S, c] = GetParam();
  Tensor q(DType::f64, {1, N, 3});  // zeros: uniform weights over visible keys
  Tensor k = random_tensor({1, S, 3}, 10);
  AttentionOptions o;
  o.causal = c;
  o.return_weights = true;
  o.return_lse = true;
  auto r = attention(q, k, index_values(1, S), o);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t last = c == Causal::top_left ? i : i + S - N;  // last visible key
    const int64_t visible = std::clamp<int64_t>(last + 1, 0, S);
    if (visible == 0) {
      EXPECT_EQ(r.out.get(i), 0.0) << "fully masked row " << i;
      EXPECT_EQ(r.lse.get(i), -INFINITY);
      for (int64_t j = 0; j < S; ++j) EXPECT_EQ(r.weights.get(i * S + j), 0.0);
      continue;
    }
    EXPECT_NEAR(r.out.get(i), (visible - 1) / 2.0, 1e-12) << "row " << i;
    EXPECT_NEAR(r.lse.get(i), std::log(static_cast<double>(visible)), 1e-12);
    for (int64_t j = 0; j < S; ++j)
      EXPECT_NEAR(r.weights.get(i * S + j), j < visible ? 1.0 / visible : 0.0, 1e-15);
  }
}

INSTANTIATE_TEST_SUITE_P(
    NvsS, CausalAlignment,
    ::testing::Values(CausalCase{4, 4, Causal::top_left}, CausalCase{4, 4, Causal::bottom_right},
                      CausalCase{3, 7, Causal::top_left}, CausalCase{3, 7, Causal::bottom_right},
                      CausalCase{7, 3, Causal::top_left}, CausalCase{7, 3, Causal::bottom_right},
                      CausalCase{1, 9, Causal::bottom_right}, CausalCase{1, 9, Causal::top_left}));

TEST(AttentionRef, GqaQueryHeadReadsItsGroupsKvHead) {
  // Hq = 6, Hkv = 2: heads 0-2 read kv head 0, heads 3-5 read kv head 1.
  Tensor q = random_tensor({6, 3, 4}, 11), k = random_tensor({2, 5, 4}, 12), v = random_tensor({2, 5, 3}, 13);
  Tensor out = attention(q, k, v).out;
  for (int64_t h = 0; h < 6; ++h)
    for (int64_t i = 0; i < 3; ++i) {
      auto want = brute_row(q, k, v, h, h / 3, i, 0.5, std::vector<bool>(5, true));
      for (int64_t e = 0; e < 3; ++e) EXPECT_NEAR(out.get((h * 3 + i) * 3 + e), want[e], 1e-14);
    }
}

TEST(AttentionRef, BoolMaskBroadcastsLikeNumPy) {
  // Leading batch dims [2, 3]; one mask [N, S] broadcast vs the same mask
  // materialised as [2, 3, Hq, N, S]; and a per-head mask [Hq, 1, S].
  const int64_t Hq = 2, N = 3, S = 4;
  Tensor q = random_tensor({2, 3, Hq, N, 5}, 14), k = random_tensor({2, 3, 1, S, 5}, 15),
         v = random_tensor({2, 3, 1, S, 2}, 16);
  Tensor small(DType::boolean, {N, S});
  Tensor full(DType::boolean, {2, 3, Hq, N, S});
  for (int64_t i = 0; i < N * S; ++i) small.data<bool>()[i] = (i * 7) % 3 != 0;
  for (int64_t i = 0; i < full.numel(); ++i) full.data<bool>()[i] = small.data<bool>()[i % (N * S)];
  AttentionOptions a, b;
  a.mask = small;
  b.mask = full;
  Tensor oa = attention(q, k, v, a).out, ob = attention(q, k, v, b).out;
  for (int64_t i = 0; i < oa.numel(); ++i) EXPECT_EQ(oa.get(i), ob.get(i));

  Tensor per_head(DType::boolean, {Hq, 1, S});  // head 0 sees key 0 only; head 1 all
  per_head.data<bool>()[0] = true;
  for (int64_t j = 0; j < S; ++j) per_head.data<bool>()[S + j] = true;
  AttentionOptions c;
  c.mask = per_head;
  Tensor oc = attention(q, k, v, c).out;
  for (int64_t i = 0; i < N; ++i)  // batch (0,0), head 0, row i == v[0,0,0,0,:]
    for (int64_t e = 0; e < 2; ++e) EXPECT_NEAR(oc.get(i * 2 + e), v.get(e), 1e-15);
}

TEST(AttentionRef, FloatMaskIsAdditive) {
  Tensor q = random_tensor({1, 2, 3}, 17), k = random_tensor({1, 4, 3}, 18), v = random_tensor({1, 4, 3}, 19);
  // -inf in a float mask blocks exactly like false in a bool mask.
  Tensor fmask = Tensor::from<double>({2, 4}, {0, -INFINITY, 0, 0, -INFINITY, 0, 0, -INFINITY});
  Tensor bmask(DType::boolean, {2, 4});
  for (int64_t i = 0; i < 8; ++i) bmask.data<bool>()[i] = fmask.get(i) == 0.0;
  AttentionOptions a, b;
  a.mask = fmask;
  b.mask = bmask;
  Tensor oa = attention(q, k, v, a).out, ob = attention(q, k, v, b).out;
  for (int64_t i = 0; i < oa.numel(); ++i) EXPECT_DOUBLE_EQ(oa.get(i), ob.get(i));
  // A constant bias per row changes nothing (softmax shift invariance)...
  Tensor row_bias = Tensor::from<float>({2, 1}, {5.f, -3.f});
  AttentionOptions c;
  c.mask = row_bias;
  Tensor oc = attention(q, k, v, c).out, plain = attention(q, k, v).out;
  for (int64_t i = 0; i < oc.numel(); ++i) EXPECT_NEAR(oc.get(i), plain.get(i), 1e-14);
  // ...but a bias of log(2) on key 0 doubles its unnormalised weight.
  Tensor bias = Tensor::from<double>({4}, {std::log(2.0), 0, 0, 0});
  AttentionOptions d;
  d.mask = bias;
  d.return_weights = true;
  AttentionOptions w;
  w.return_weights = true;
  auto rb = attention(q, k, v, d), rp = attention(q, k, v, w);
  const double ratio = (rb.weights.get(0) / rb.weights.get(1)) / (rp.weights.get(0) / rp.weights.get(1));
  EXPECT_NEAR(ratio, 2.0, 1e-12);
}

TEST(AttentionRef, MaskAndCausalCombineByAnd) {
  Tensor q(DType::f64, {1, 3, 2});
  Tensor k = random_tensor({1, 3, 2}, 20);
  Tensor mask(DType::boolean, {3});  // key 0 blocked for everyone
  mask.data<bool>()[1] = mask.data<bool>()[2] = true;
  AttentionOptions o;
  o.mask = mask;
  o.causal = Causal::top_left;
  o.return_lse = true;
  auto r = attention(q, k, index_values(1, 3), o);
  EXPECT_EQ(r.out.get(0), 0.0);  // row 0 saw only key 0, which the mask blocks
  EXPECT_EQ(r.lse.get(0), -INFINITY);
  EXPECT_NEAR(r.out.get(1), 1.0, 1e-15);
  EXPECT_NEAR(r.out.get(2), 1.5, 1e-15);
}

TEST(AttentionRef, Float32MatchesFloat64) {
  Tensor q = random_tensor({2, 2, 5, 16}, 21), k = random_tensor({2, 1, 9, 16}, 22),
         v = random_tensor({2, 1, 9, 8}, 23);
  Tensor o64 = attention(q, k, v).out;
  Tensor o32 = attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32)).out;
  ASSERT_EQ(o32.dtype(), DType::f32);
  for (int64_t i = 0; i < o64.numel(); ++i) EXPECT_NEAR(o32.get(i), o64.get(i), 2e-6);
}

TEST(AttentionRef, LseIsLogSumExpOfScaledScores) {
  Tensor q = random_tensor({1, 1, 4}, 24), k = random_tensor({1, 3, 4}, 25), v = random_tensor({1, 3, 1}, 26);
  AttentionOptions o;
  o.return_lse = true;
  auto r = attention(q, k, v, o);
  double sum = 0;
  for (int64_t j = 0; j < 3; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < 4; ++d) dot += q.get(d) * k.get(j * 4 + d);
    sum += std::exp(dot / 2.0);
  }
  EXPECT_NEAR(r.lse.get(0), std::log(sum), 1e-14);
}

// Each bad argument names what was expected and what was found.
struct BadCase { const char* name; Shape q, k, v; const char* message; };

class AttentionRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(AttentionRejects, WithAClearMessage) {
  const BadCase& c = GetParam();
  try {
    attention(Tensor(DType::f32, c.q), Tensor(DType::f32, c.k), Tensor(DType::f32, c.v));
    FAIL() << "no error for " << c.name;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(c.message)) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionRejects,
    ::testing::Values(
        BadCase{"head dims differ", {1, 2, 8}, {1, 3, 7}, {1, 3, 8}, "expected head dim D = 8"},
        BadCase{"too few dims", {2, 8}, {1, 3, 8}, {1, 3, 8}, "q: expected at least 3 dims"},
        BadCase{"gqa ratio", {3, 2, 8}, {2, 3, 8}, {2, 3, 8}, "must be a multiple of key/value heads Hkv = 2"},
        BadCase{"kv length differs", {1, 2, 8}, {1, 3, 8}, {1, 4, 8}, "v: expected [..., Hkv=1, S=3, Dv]"},
        BadCase{"batch differs", {2, 1, 2, 8}, {3, 1, 3, 8}, {3, 1, 3, 8}, "leading batch dims of q [2]"},
        BadCase{"D = 0", {1, 2, 0}, {1, 3, 0}, {1, 3, 4}, "head dim D must be at least 1"},
        BadCase{"N = 0", {1, 0, 4}, {1, 3, 4}, {1, 3, 4}, "query length N must be at least 1"},
        BadCase{"S = 0", {1, 2, 4}, {1, 0, 4}, {1, 0, 4}, "key length S must be at least 1"},
        BadCase{"Dv = 0", {1, 2, 4}, {1, 3, 4}, {1, 3, 0}, "head dim Dv must be at least 1"}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(AttentionRef, RejectsBadValuesAndMasks) {
  Tensor q(DType::f32, {1, 2, 4}), k(DType::f32, {1, 3, 4}), v(DType::f32, {1, 3, 4});
  k.data<float>()[5] = NAN;
  try {
    attention(q, k, v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("k: values must be finite, found NaN at [0, 1, 1]"));
  }
  k.data<float>()[5] = 0;
  Tensor bad_mask(DType::boolean, {3, 3});
  AttentionOptions o;
  o.mask = bad_mask;
  try {
    attention(q, k, v, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mask: expected a shape broadcastable to [1, 2, 3]"));
  }
  Tensor plus_inf = Tensor::from<float>({3}, {0.f, INFINITY, 0.f});
  o.mask = plus_inf;
  EXPECT_THROW(attention(q, k, v, o), Error);
  AttentionOptions s;
  s.scale = INFINITY;
  EXPECT_THROW(attention(q, k, v, s), Error);
  EXPECT_THROW(attention(q, k.to(DType::f64), v), Error);
  EXPECT_THROW(attention(Tensor(DType::boolean, {1, 2, 4}), k, v), Error);
}
