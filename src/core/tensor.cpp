#include "qkv/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>
#include <limits>

namespace qkv {

namespace detail {

void* storage_alloc(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  // Only a hint: without THP support (or with it off) this fails harmlessly.
  if (align == kHuge) madvise(p, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
  return p;
}

void storage_free(void* p) noexcept { std::free(p); }

}  // namespace detail

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
  storage_.assign(static_cast<size_t>(numel_) * dtype_size(dtype_), std::byte{0});
}

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

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out(dtype, shape_);
  if (dtype_ == DType::boolean || dtype == DType::boolean)
    throw Error(std::string("cannot convert ") + dtype_name(dtype_) + " to " + dtype_name(dtype));
  // Every pair goes through get() (exact as double) except the two that
  // round: to float32 and to bf16 (via float32, as NumPy/PyTorch do).
  for (int64_t i = 0; i < numel_; ++i) {
    const double x = get(i);
    switch (dtype) {
      case DType::f32: out.data<float>()[i] = static_cast<float>(x); break;
      case DType::f64: out.data<double>()[i] = x; break;
      case DType::bf16: out.data<bfloat16>()[i] = bf16_from_float(static_cast<float>(x)); break;
      case DType::boolean: break;
    }
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
