// TensorView: strides, slices, transposes and copies read the right elements.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strided.h"

using namespace qkv;
using namespace qkv::test_strided;
using ::testing::HasSubstr;

namespace {

Tensor iota(Shape shape) {
  Tensor t(DType::f32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(TensorView, FromTensorIsCOrdered) {
  const Tensor t = iota({2, 3, 4});
  const TensorView v = t;
  EXPECT_EQ(v.raw(), t.raw());
  EXPECT_EQ(v.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(v.dim(-1), 4);
  EXPECT_EQ(v.stride(-2), 4);
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_TRUE(v.inner_contiguous());
  EXPECT_TRUE(static_cast<bool>(v));
  EXPECT_FALSE(static_cast<bool>(TensorView()));
  EXPECT_EQ(v.data<float>()[5], 5.0f);
  EXPECT_THROW(v.data<double>(), Error);
  EXPECT_THROW(v.dim(3), Error);
  EXPECT_THROW(TensorView(t.raw(), DType::f32, {2, 3}, {1}), Error);
}

TEST(TensorView, SliceSharesMemory) {
  const Tensor t = iota({2, 3, 4});
  const TensorView s = TensorView(t).slice(-2, 1, 3);  // [2, 2, 4]
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(s.data<float>(), t.data<float>() + 4);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_TRUE(s.inner_contiguous());
  const Tensor c = s.contiguous();
  EXPECT_EQ(c.data<float>()[0], 4.0f);
  EXPECT_EQ(c.data<float>()[7], 11.0f);
  EXPECT_EQ(c.data<float>()[8], 16.0f);  // batch 1, row 1
  EXPECT_THROW(TensorView(t).slice(0, 1, 3), Error);
  try {
    TensorView(t).slice(1, 2, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("slice: range [2, 1) out of bounds for dim 1"));
  }
}

TEST(TensorView, TransposeSwapsStrides) {
  const Tensor t = iota({2, 3});
  const TensorView tr = TensorView(t).transpose(0, 1);  // [3, 2]
  EXPECT_EQ(tr.strides(), (Strides{1, 3}));
  EXPECT_FALSE(tr.inner_contiguous());
  const Tensor c = tr.contiguous();
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  const std::vector<float> want = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.data<float>()[i], want[i]);
}

TEST(TensorView, BroadcastWithZeroStrides) {
  const Tensor row = iota({4});
  const TensorView b(row.raw(), DType::f32, {3, 4}, {0, 1});
  EXPECT_FALSE(b.is_contiguous());
  const Tensor c = b.contiguous();
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(c.data<float>()[i], static_cast<float>(i % 4));
}

TEST(TensorView, RestrideReadsAsTheOriginal) {
  const Tensor t = iota({2, 3, 4});
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 1, 0}, {1, 0, 2}}) {
    const Strided s = restride(t, order, 2);
    EXPECT_TRUE(same_bits(s.view.contiguous(), t));
  }
  EXPECT_TRUE(same_bits(fortran(t).view.contiguous(), t));
  EXPECT_TRUE(fortran(t).view.stride(0) == 1);
}

}  // namespace
