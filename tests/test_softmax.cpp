#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "qkv/softmax.h"
#include "core/ref/softmax_ref.h"

using namespace qkv;
using ::testing::HasSubstr;

TEST(Softmax, HugeScoresDoNotOverflow) {
  // exp(1000) overflows double; subtracting the row max keeps it finite.
  double s[3] = {1000.0, 1000.0, 999.0};
  double p[3];
  const double lse = ref::softmax_row(s, p, 3);
  const double e = std::exp(-1.0);
  EXPECT_NEAR(p[0], 1.0 / (2.0 + e), 1e-15);
  EXPECT_NEAR(p[1], 1.0 / (2.0 + e), 1e-15);
  EXPECT_NEAR(p[2], e / (2.0 + e), 1e-15);
  EXPECT_NEAR(lse, 1000.0 + std::log(2.0 + e), 1e-12);
}

TEST(Softmax, HugeNegativeScores) {
  double s[2] = {-1e300, -1e300 + 1e284};
  double p[2];
  ref::softmax_row(s, p, 2);
  EXPECT_TRUE(std::isfinite(p[0]) && std::isfinite(p[1]));
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-15);
}

TEST(Softmax, MinusInfGetsExactlyZero) {
  double s[4] = {0.5, -INFINITY, 0.5, -INFINITY};
  double p[4];
  ref::softmax_row(s, p, 4);
  EXPECT_EQ(p[1], 0.0);
  EXPECT_EQ(p[3], 0.0);
  EXPECT_DOUBLE_EQ(p[0], 0.5);
}

TEST(Softmax, AllMinusInfRowIsZeroNotNaN) {
  double s[3] = {-INFINITY, -INFINITY, -INFINITY};
  double p[3];
  const double lse = ref::softmax_row(s, p, 3);
  for (double x : p) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(lse, -INFINITY);
}

TEST(Softmax, TensorRowsAndDtype) {
  Tensor x = Tensor::from<float>({2, 3}, {1.f, 2.f, 3.f, 0.f, 0.f, -INFINITY});
  Tensor y = softmax(x);
  EXPECT_EQ(y.dtype(), DType::f32);
  double row0 = 0.0;
  for (int j = 0; j < 3; ++j) row0 += y.data<float>()[j];
  EXPECT_NEAR(row0, 1.0, 1e-6);
  EXPECT_FLOAT_EQ(y.data<float>()[3], 0.5f);
  EXPECT_EQ(y.data<float>()[5], 0.0f);
  // Shift invariance: softmax(x + c) == softmax(x).
  Tensor x2 = Tensor::from<double>({3}, {101.0, 102.0, 103.0});
  Tensor x3 = Tensor::from<double>({3}, {1.0, 2.0, 3.0});
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(softmax(x2).data<double>()[j], softmax(x3).data<double>()[j], 1e-15);
}

TEST(Softmax, RejectsNaNAndPlusInf) {
  try {
    softmax(Tensor::from<double>({2}, {1.0, NAN}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NaN at [1]"));
  }
  EXPECT_THROW(softmax(Tensor::from<double>({2}, {1.0, INFINITY})), Error);
  EXPECT_THROW(softmax(Tensor(DType::boolean, {2})), Error);
}
