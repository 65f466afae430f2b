// test_layers_attn.cpp: the layers that move and turn attention's heads
// (qkv/nn.h: RoPE, head split and merge) and the Linear weight layouts the
// lessons and the GPT share. The other layers are in test_nn.cpp.
//
// 1. RoPE: the table's values, rope_backward against central differences of
//    rope_forward (float64), float32 = float64 rounded once (both compute in
//    double), in place = out of place, and the table's range checks.
// 2. Heads: split and merge against direct indexing, on the GPT's fused
//    [q | k | v] row, and each undoing the other.
// 3. Linear: the [in, out] layout gives the same sums as [out, in] with the
//    weight transposed, in float64 bit for bit and in float32 on the GEMM.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "qkv/error.h"
#include "qkv/nn.h"

using ::testing::HasSubstr;

namespace qkv {
namespace {

template <class T = double>
std::vector<T> random_vec(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
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

// ---- 1. RoPE ------------------------------------------------------------------

TEST(RopeTable, HoldsCosAndSinOfEachAngle) {
  const int64_t P = 9, D = 6;
  const nn::RopeTable t(P, D, 500.0);
  EXPECT_EQ(t.positions(), P);
  EXPECT_EQ(t.head_dim(), D);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double angle = static_cast<double>(p) / std::pow(500.0, 2.0 * i / D);
      EXPECT_NEAR(t.row(p)[2 * i], std::cos(angle), 1e-15);
      EXPECT_NEAR(t.row(p)[2 * i + 1], std::sin(angle), 1e-15);
    }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  const int64_t R = 3, T = 5, D = 8, pos0 = 2;
  const nn::RopeTable table(pos0 + T, D);
  std::vector<double> x = random_vec(rng, R * T * D), dout = random_vec(rng, R * T * D);
  std::vector<double> out(x.size()), dx(x.size());
  // loss = Σ dout ⊙ rope(x), so the gradient is rope_backward(dout).
  auto loss = [&] {
    nn::rope_forward(out.data(), x.data(), table, R, T, D, pos0);
    return dot(dout, out);
  };
  nn::rope_backward(dx.data(), dout.data(), table, R, T, D, pos0);
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    EXPECT_NEAR(dx[i], (up - down) / (2 * h), 1e-9) << i;
  }
}

TEST(Rope, Float32IsFloat64RoundedOnceAndInPlaceIsTheSame) {
  std::mt19937 rng(2);
  const int64_t R = 4, T = 7, D = 16;
  const nn::RopeTable table(T + 3, D);
  const std::vector<float> x = random_vec<float>(rng, R * T * D);
  const std::vector<double> x64(x.begin(), x.end());
  std::vector<float> y(x.size()), inplace = x;
  std::vector<double> y64(x.size());
  nn::rope_forward(y.data(), x.data(), table, R, T, D, 3);
  nn::rope_forward(inplace.data(), inplace.data(), table, R, T, D, 3);
  nn::rope_forward(y64.data(), x64.data(), table, R, T, D, 3);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], static_cast<float>(y64[i])) << i;
    ASSERT_EQ(inplace[i], y[i]) << i;
  }
  // And back: the rotation's inverse, to rounding.
  nn::rope_backward(inplace.data(), inplace.data(), table, R, T, D, 3);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(inplace[i], x[i], 1e-6) << i;
}

TEST(Rope, Errors) {
  expect_error([] { nn::RopeTable(4, 7); }, "rope: head dim D must be even");
  expect_error([] { nn::RopeTable(-1, 8); }, "rope: expected positions >= 0, found -1");
  expect_error([] { nn::RopeTable(4, 8, 0.0); }, "rope: expected a finite base > 0");
  const nn::RopeTable table(8, 4);
  std::vector<float> x(4 * 2 * 4);
  expect_error([&] { nn::rope_forward(x.data(), x.data(), table, 4, 2, 4, 7); },
               "rope_forward: positions 7 .. 8 outside the table's 0 .. 7");
  expect_error([&] { nn::rope_backward(x.data(), x.data(), table, 2, 2, 8, 0); },
               "rope_backward: head dim D = 8 but the table was built for 4");
  // A table may start past 0 (one call's positions only): the same angles.
  const nn::RopeTable late(2, 4, 10000.0, 1000000);
  EXPECT_EQ(late.row(1000001)[0], std::cos(1000001.0));  // theta_0 = 1
  EXPECT_EQ(late.row(1000001)[1], std::sin(1000001.0));
  expect_error([&] { nn::rope_forward(x.data(), x.data(), late, 4, 2, 4, 999999); },
               "rope_forward: positions 999999 .. 1000000 outside the table's 1000000 .. 1000001");
}

// ---- 2. head split and merge ------------------------------------------------

TEST(Heads, SplitTheFusedRowAndMergeItBack) {
  // The GPT's c_attn row [q heads | k heads | v heads], Hq = 4, Hkv = 2.
  const int64_t B = 2, T = 3, Hq = 4, Hkv = 2, D = 5, row = (Hq + 2 * Hkv) * D;
  std::vector<float> qkv(B * T * row);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
  std::vector<float> q(B * Hq * T * D), k(B * Hkv * T * D), v(B * Hkv * T * D);
  nn::split_heads(q.data(), qkv.data(), B, T, Hq, D, row, 0);
  nn::split_heads(k.data(), qkv.data(), B, T, Hkv, D, row, Hq * D);
  nn::split_heads(v.data(), qkv.data(), B, T, Hkv, D, row, (Hq + Hkv) * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const float* r = qkv.data() + (b * T + t) * row;
        for (int64_t h = 0; h < Hq; ++h)
          ASSERT_EQ(q[((b * Hq + h) * T + t) * D + d], r[h * D + d]);
        for (int64_t g = 0; g < Hkv; ++g) {
          ASSERT_EQ(k[((b * Hkv + g) * T + t) * D + d], r[(Hq + g) * D + d]);
          ASSERT_EQ(v[((b * Hkv + g) * T + t) * D + d], r[(Hq + Hkv + g) * D + d]);
        }
      }
  std::vector<float> back(qkv.size(), -1.0f);
  nn::merge_heads(back.data(), q.data(), B, T, Hq, D, row, 0);
  nn::merge_heads(back.data(), k.data(), B, T, Hkv, D, row, Hq * D);
  nn::merge_heads(back.data(), v.data(), B, T, Hkv, D, row, (Hq + Hkv) * D);
  EXPECT_EQ(back, qkv);
}

// split_qkv and merge_qkv are the three split_heads / merge_heads calls
// above in one pass: the same elements, in float and double, large enough
// (B T row >= kParallelMin) to run threaded, and with Hkv = Hq and Hkv = 1.
template <class T>
void expect_qkv_like_three_calls(int64_t B, int64_t Tn, int64_t Hq, int64_t Hkv, int64_t D) {
  const int64_t row = (Hq + 2 * Hkv) * D;
  std::vector<T> qkv(B * Tn * row);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<T>(i) + T(0.25);
  std::vector<T> q(B * Hq * Tn * D), k(B * Hkv * Tn * D), v(k.size());
  std::vector<T> q3(q.size(), T(-1)), k3(k.size(), T(-1)), v3(v.size(), T(-1));
  nn::split_heads(q.data(), qkv.data(), B, Tn, Hq, D, row, 0);
  nn::split_heads(k.data(), qkv.data(), B, Tn, Hkv, D, row, Hq * D);
  nn::split_heads(v.data(), qkv.data(), B, Tn, Hkv, D, row, (Hq + Hkv) * D);
  nn::split_qkv(q3.data(), k3.data(), v3.data(), qkv.data(), B, Tn, Hq, Hkv, D);
  EXPECT_EQ(q3, q);
  EXPECT_EQ(k3, k);
  EXPECT_EQ(v3, v);
  std::vector<T> back(qkv.size(), T(-1));
  nn::merge_qkv(back.data(), q.data(), k.data(), v.data(), B, Tn, Hq, Hkv, D);
  EXPECT_EQ(back, qkv);
}

TEST(Heads, SplitQkvIsTheThreeSplitsInOnePass) {
  expect_qkv_like_three_calls<float>(2, 3, 4, 2, 5);
  expect_qkv_like_three_calls<double>(2, 3, 4, 1, 5);
  expect_qkv_like_three_calls<float>(12, 64, 4, 4, 32);  // the training recipe's, threaded
  expect_qkv_like_three_calls<double>(3, 70, 6, 2, 16);
}

// With qk_paired each q and k head of the row holds its features as a GGUF
// llama file's rows give them, (x_0, x_{D/2}, x_1, x_{D/2+1}, ...): split
// back into halves, they are the heads of the row in transformers' order;
// v's heads are copied as they are.
template <class T>
void expect_paired_split_like_halves(int64_t B, int64_t Tn, int64_t Hq, int64_t Hkv, int64_t D) {
  const int64_t row = (Hq + 2 * Hkv) * D, half = D / 2;
  std::vector<T> halves(B * Tn * row), paired(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<T>(i) + T(0.25);
  for (int64_t r = 0; r < B * Tn; ++r)
    for (int64_t h = 0; h < Hq + 2 * Hkv; ++h)
      for (int64_t j = 0; j < D; ++j) {
        const int64_t at = r * row + h * D;
        paired[at + (h < Hq + Hkv ? 2 * (j % half) + j / half : j)] = halves[at + j];
      }
  std::vector<T> q(B * Hq * Tn * D), k(B * Hkv * Tn * D), v(k.size());
  std::vector<T> q2(q.size(), T(-1)), k2(k.size(), T(-1)), v2(v.size(), T(-1));
  nn::split_qkv(q.data(), k.data(), v.data(), halves.data(), B, Tn, Hq, Hkv, D);
  nn::split_qkv(q2.data(), k2.data(), v2.data(), paired.data(), B, Tn, Hq, Hkv, D, true);
  EXPECT_EQ(q2, q);
  EXPECT_EQ(k2, k);
  EXPECT_EQ(v2, v);
}

TEST(Heads, SplitQkvPutsPairedHeadsBackInHalves) {
  expect_paired_split_like_halves<float>(2, 3, 4, 2, 6);
  expect_paired_split_like_halves<double>(1, 5, 2, 1, 2);
  expect_paired_split_like_halves<float>(12, 64, 4, 4, 32);  // threaded
}

// ---- 3. Linear weight layouts -------------------------------------------------

TEST(LinearLayout, InOutEqualsOutInTransposed) {
  std::mt19937 rng(3);
  for (auto [BT, C, OC] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {5, 7, 3}, {37, 65, 19}}) {
    SCOPED_TRACE("BT " + std::to_string(BT) + " C " + std::to_string(C) + " OC " +
                 std::to_string(OC));
    const std::vector<double> x = random_vec(rng, BT * C), w = random_vec(rng, OC * C);
    const std::vector<double> b = random_vec(rng, OC);
    std::vector<double> wt(C * OC);  // [C, OC] = wᵀ
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) wt[c * OC + o] = w[o * C + c];
    std::vector<double> y1(BT * OC), y2(BT * OC);
    nn::linear_forward(y1.data(), x.data(), w.data(), b.data(), BT, C, OC);
    nn::linear_forward(y2.data(), x.data(), wt.data(), b.data(), BT, C, OC,
                       nn::WeightLayout::in_out);
    EXPECT_EQ(y1, y2);  // the same products summed in the same order
    const std::vector<float> xf(x.begin(), x.end()), wtf(wt.begin(), wt.end());
    const std::vector<float> bf(b.begin(), b.end());
    std::vector<float> yf(BT * OC);
    nn::linear_forward(yf.data(), xf.data(), wtf.data(), bf.data(), BT, C, OC,
                       nn::WeightLayout::in_out);
    for (int64_t i = 0; i < BT * OC; ++i) EXPECT_NEAR(yf[i], y1[i], 1e-5 * (1.0 + C / 8.0)) << i;
  }
}

}  // namespace
}  // namespace qkv
