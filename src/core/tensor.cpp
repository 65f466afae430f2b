#include "qkv/tensor.h"

#include "core/values.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace qkv {

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::boolean: return "bool";
    case DType::bf16: return "bfloat16";
  }
  return "?";
}

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::boolean: return 1;
    case DType::bf16: return 2;
  }
  return 0;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw Error("shape " + shape_str(shape) + " has too many elements");
    n *= d;
  }
  return n;
}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), numel_(shape_numel(shape_)) {
  if (static_cast<uint64_t>(numel_) > std::numeric_limits<size_t>::max() / 8)
    throw Error("shape " + shape_str(shape_) + " is too large to allocate");
  // Zeros from storage_alloc: resize writes nothing (StorageAllocator).
  storage_.resize(static_cast<size_t>(numel_) * dtype_size(dtype_));
}

Tensor::Tensor(const Tensor&) = default;
Tensor::Tensor(Tensor&&) noexcept = default;
Tensor& Tensor::operator=(const Tensor&) = default;
Tensor& Tensor::operator=(Tensor&&) noexcept = default;
Tensor::~Tensor() = default;

int64_t Tensor::dim(int i) const {
  const int r = rank();
  const int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r)
    throw Error("dim " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  return shape_[j];
}

double Tensor::get(int64_t i) const {
  switch (dtype_) {
    case DType::f32: return data<float>()[i];
    case DType::f64: return data<double>()[i];
    case DType::boolean: return data<bool>()[i] ? 1.0 : 0.0;
    case DType::bf16: return bf16_to_float(data<bfloat16>()[i]);
  }
  return 0.0;
}

namespace {

// One typed loop per pair of dtypes (a get() and a switch per element made
// rounding a model's gradients to bf16 cost more than computing them).
template <class S, class D>
void convert(const S* src, D* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = narrow<D>(as_double(src[i]));
}

template <class S>
void convert_to(const S* src, Tensor& out) {
  switch (out.dtype()) {
    case DType::f32: return convert(src, out.data<float>(), out.numel());
    case DType::f64: return convert(src, out.data<double>(), out.numel());
    case DType::bf16: return convert(src, out.data<bfloat16>(), out.numel());
    case DType::boolean: return;
  }
}

}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (dtype_ == DType::boolean || dtype == DType::boolean)
    throw Error(std::string("cannot convert ") + dtype_name(dtype_) + " to " + dtype_name(dtype));
  Tensor out(dtype, shape_);
  switch (dtype_) {
    case DType::f32: convert_to(data<float>(), out); break;
    case DType::f64: convert_to(data<double>(), out); break;
    case DType::bf16: convert_to(data<bfloat16>(), out); break;
    case DType::boolean: break;
  }
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel_)
    throw Error("cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor out = *this;
  out.shape_ = std::move(shape);
  return out;
}

std::string index_str(const Shape& shape, int64_t i) {
  Shape idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return shape_str(idx);
}

}  // namespace qkv
