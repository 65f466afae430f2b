// test_positional.cpp: sinusoidal and learned tables, token lookup, and the
// properties that make RoPE useful (identity at 0, norms kept, relative scores).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/positional.h"
#include "qkv/rng.h"

using ::testing::HasSubstr;

namespace qkv {
namespace {

Tensor randn(Shape shape, NumpyGenerator& rng) {
  Tensor t(DType::f64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.standard_normal();
  return t;
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

double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.get(i) * b.get(i);
  return s;
}

TEST(Sinusoidal, MatchesTheFormula) {
  const int64_t T = 50, C = 16;
  const Tensor pe = sinusoidal_encoding(T, C);
  ASSERT_EQ(pe.shape(), (Shape{T, C}));
  EXPECT_EQ(pe.dtype(), DType::f64);
  for (int64_t t : {0, 1, 7, 49})
    for (int64_t i : {0, 1, 5, 7}) {
      const double angle = static_cast<double>(t) / std::pow(10000.0, 2.0 * static_cast<double>(i) / C);
      EXPECT_NEAR(pe.get(t * C + 2 * i), std::sin(angle), 1e-15);
      EXPECT_NEAR(pe.get(t * C + 2 * i + 1), std::cos(angle), 1e-15);
    }
  for (int64_t j = 0; j < C; ++j) EXPECT_EQ(pe.get(j), j % 2 == 0 ? 0.0 : 1.0);
}

TEST(Sinusoidal, OddWidthEndsWithASine) {
  const Tensor pe = sinusoidal_encoding(3, 5);
  ASSERT_EQ(pe.shape(), (Shape{3, 5}));
  EXPECT_NEAR(pe.get(2 * 5 + 4), std::sin(2.0 / std::pow(10000.0, 4.0 / 5.0)), 1e-15);
  EXPECT_NEAR(pe.get(2 * 5 + 3), std::cos(2.0 / std::pow(10000.0, 2.0 / 5.0)), 1e-15);
}

TEST(Sinusoidal, Errors) {
  expect_error([] { sinusoidal_encoding(-1, 4); },
               "sinusoidal_encoding: expected T >= 0 and C >= 1, found T = -1, C = 4");
  expect_error([] { sinusoidal_encoding(4, 0); }, "found T = 4, C = 0");
}

TEST(LearnedPositionEmbedding, InitAndSlice) {
  NumpyGenerator r1(9), r2(9), direct(9);
  const auto a = LearnedPositionEmbedding::init(64, 32, r1);
  const auto b = LearnedPositionEmbedding::init(64, 32, r2);
  ASSERT_EQ(a.table.shape(), (Shape{64, 32}));
  std::vector<double> want(64 * 32);
  direct.normal(want.data(), want.size(), 0.0, 0.02);
  double sq = 0.0;
  for (int64_t i = 0; i < a.table.numel(); ++i) {
    EXPECT_EQ(a.table.get(i), want[i]);
    EXPECT_EQ(a.table.get(i), b.table.get(i));
    sq += want[i] * want[i];
  }
  EXPECT_NEAR(std::sqrt(sq / 2048.0), 0.02, 0.002);  // the GPT-2 scale
  const Tensor rows = a.forward(3, 10);
  ASSERT_EQ(rows.shape(), (Shape{3, 32}));
  for (int64_t i = 0; i < rows.numel(); ++i) EXPECT_EQ(rows.get(i), a.table.get(10 * 32 + i));
  EXPECT_EQ(a.forward(64).shape(), (Shape{64, 32}));
}

TEST(LearnedPositionEmbedding, Errors) {
  NumpyGenerator rng(0);
  const auto pos = LearnedPositionEmbedding::init(8, 4, rng);
  expect_error([&] { pos.forward(5, 4); },
               "position embedding: positions up to offset + T = 4 + 5 = 9 exceed T_max = 8");
  expect_error([&] { pos.forward(-1); }, "expected T >= 0 and offset >= 0");
  expect_error([&] { LearnedPositionEmbedding::init(0, 4, rng); },
               "position embedding: table dims must be at least 1, found [0, 4]");
}

TEST(TokenEmbedding, LooksUpRows) {
  NumpyGenerator rng(4);
  const auto emb = TokenEmbedding::init(10, 3, rng);
  const Tensor e = emb.forward({2, 0, 9, 2, 5, 1}, {2, 3});
  ASSERT_EQ(e.shape(), (Shape{2, 3, 3}));
  const std::vector<int64_t> ids = {2, 0, 9, 2, 5, 1};
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(e.get(r * 3 + c), emb.table.get(ids[r] * 3 + c));
  EXPECT_EQ(emb.forward({7, 7}).shape(), (Shape{2, 3}));
}

TEST(TokenEmbedding, Errors) {
  NumpyGenerator rng(0);
  const auto emb = TokenEmbedding::init(10, 3, rng);
  expect_error([&] { emb.forward({1, 2, 3, 10}, {2, 2}); },
               "token embedding: id 10 at [1, 1] is outside [0, vocab = 10)");
  expect_error([&] { emb.forward({-1}); }, "id -1 at [0]");
  expect_error([&] { emb.forward({1, 2, 3}, {2, 2}); }, "token embedding: 3 ids for shape [2, 2]");
}

TEST(Rope, HalfSplitPairsByHand) {
  // D = 4: pairs (0, 2) with theta 1 and (1, 3) with theta 10000^(-1/2) = 0.01.
  const Tensor x = Tensor::from<double>({1, 4}, {1, 2, 3, 4});
  const Tensor y = apply_rope(x, 1);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.01), s1 = std::sin(0.01);
  EXPECT_NEAR(y.get(0), 1 * c0 - 3 * s0, 1e-15);
  EXPECT_NEAR(y.get(2), 3 * c0 + 1 * s0, 1e-15);
  EXPECT_NEAR(y.get(1), 2 * c1 - 4 * s1, 1e-15);
  EXPECT_NEAR(y.get(3), 4 * c1 + 2 * s1, 1e-15);
}

TEST(Rope, PositionZeroIsIdentity) {
  NumpyGenerator rng(1);
  const Tensor x = randn({2, 1, 16}, rng);
  const Tensor y = apply_rope(x);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.get(i), x.get(i));
}

TEST(Rope, RowsAdvanceThePositionAndKeepNorms) {
  NumpyGenerator rng(2);
  const int64_t T = 6, D = 10;
  const Tensor x = randn({3, T, D}, rng);
  const Tensor y = apply_rope(x, 4);
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t r = 0; r < 3 * T; ++r) {
    Tensor row(DType::f64, {1, D});
    for (int64_t d = 0; d < D; ++d) row.data<double>()[d] = x.get(r * D + d);
    const Tensor alone = apply_rope(row, 4 + r % T);
    double n_in = 0.0, n_out = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      EXPECT_EQ(y.get(r * D + d), alone.get(d));
      n_in += x.get(r * D + d) * x.get(r * D + d);
      n_out += y.get(r * D + d) * y.get(r * D + d);
    }
    EXPECT_NEAR(std::sqrt(n_out), std::sqrt(n_in), 1e-12 * std::sqrt(n_in));
  }
}

TEST(Rope, ScoresDependOnlyOnTheOffset) {
  NumpyGenerator rng(3);
  const Tensor q = randn({1, 16}, rng), k = randn({1, 16}, rng);
  auto score = [&](int64_t m, int64_t n) { return dot(apply_rope(q, m), apply_rope(k, n)); };
  const double ref = score(3, 0);
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{4, 1}, {10, 7}, {50, 47}, {100, 97}})
    EXPECT_NEAR(score(m, n), ref, 1e-12) << "m = " << m << ", n = " << n;
  EXPECT_NEAR(score(0, 3), score(20, 23), 1e-12);
  for (int64_t diff : {0, 1, 2, 5, -3}) EXPECT_GT(std::abs(score(10 + diff, 10) - ref), 1e-6);
}

TEST(Rope, Float32StaysFloat32) {
  NumpyGenerator rng(6);
  const Tensor x = randn({4, 8}, rng);
  const Tensor y32 = apply_rope(x.to(DType::f32), 7);
  EXPECT_EQ(y32.dtype(), DType::f32);
  const Tensor y64 = apply_rope(x, 7);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(y32.get(i), y64.get(i), 1e-5);
}

TEST(Rope, Errors) {
  expect_error([] { apply_rope(Tensor(DType::f64, {4, 7})); },
               "apply_rope: head dim D must be even to form (i, i + D/2) pairs, found D = 7 in "
               "shape [4, 7]");
  expect_error([] { apply_rope(Tensor(DType::f64, {8})); },
               "apply_rope: expected x [..., T, D] with at least 2 dims, found [8]");
  expect_error([] { apply_rope(Tensor(DType::f64, {2, 8}), -1); },
               "apply_rope: expected pos0 >= 0, found -1");
  expect_error([] { apply_rope(Tensor(DType::f64, {2, 8}), 0, 0.0); },
               "apply_rope: expected a finite base > 0");
  expect_error([] { apply_rope(Tensor(DType::boolean, {2, 8})); },
               "apply_rope: x: expected float32 or float64, found bool");
}

}  // namespace
}  // namespace qkv
