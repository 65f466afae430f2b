#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "qkv/tensor.h"

using namespace qkv;
using ::testing::HasSubstr;

TEST(Tensor, ShapeAndZeroFill) {
  Tensor t(DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.dim(0), 2);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
}

TEST(Tensor, ScalarAndEmpty) {
  Tensor s(DType::f64, {});
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.rank(), 0);
  Tensor e(DType::boolean, {3, 0});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.empty());
}

TEST(Tensor, WrongTypeAccessThrows) {
  Tensor t(DType::f32, {2});
  EXPECT_THROW(t.data<double>(), Error);
  try {
    t.data<bool>();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32"));
  }
}

TEST(Tensor, ConvertAndReshape) {
  Tensor t = Tensor::from<double>({2, 2}, {1.5, -2.0, 3.25, 4.0});
  Tensor f = t.to(DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.data<float>()[2], 3.25f);
  Tensor r = t.reshaped({4});
  EXPECT_EQ(r.shape(), Shape({4}));
  EXPECT_THROW(t.reshaped({3}), Error);
  EXPECT_THROW(Tensor::from<double>({3}, {1.0}), Error);
}

TEST(Tensor, BadShapes) {
  EXPECT_THROW(Tensor(DType::f32, {-1, 2}), Error);
  EXPECT_THROW(Tensor(DType::f32, {1LL << 40, 1LL << 40}), Error);
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_str({}), "[]");
}
