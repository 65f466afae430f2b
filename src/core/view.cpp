#include "qkv/view.h"

#include <cstring>
#include <string>

namespace qkv {

Strides c_strides(const Shape& shape) {
  Strides s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

TensorView::TensorView(const void* data, DType dtype, Shape shape, Strides strides)
    : data_(data), dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)),
      numel_(shape_numel(shape_)) {
  if (strides_.empty() && !shape_.empty()) strides_ = c_strides(shape_);
  if (strides_.size() != shape_.size())
    throw Error("TensorView: " + std::to_string(strides_.size()) + " strides for shape " +
                shape_str(shape_));
}

namespace {
// Where a view of a Tensor with a zero-sized dim points: such a Tensor has
// no buffer, but it was given (a mask of shape (0,) must be checked and
// refused, not read as "no mask"); no element of it is ever read.
const std::byte kNoElements{};
}  // namespace

TensorView::TensorView(const Tensor& t)
    : data_(t.raw() || t.rank() == 0 ? t.raw() : &kNoElements), dtype_(t.dtype()),
      shape_(t.shape()), strides_(c_strides(t.shape())), numel_(t.numel()) {}

int TensorView::axis(int i, const char* what) const {
  const int r = rank();
  const int j = i < 0 ? i + r : i;
  if (j < 0 || j >= r)
    throw Error(std::string(what) + ": dim " + std::to_string(i) + " out of range for shape " +
                shape_str(shape_));
  return j;
}

int64_t TensorView::dim(int i) const { return shape_[axis(i, "dim")]; }
int64_t TensorView::stride(int i) const { return strides_[axis(i, "stride")]; }

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int d = rank() - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != expect) return false;
    expect *= shape_[d];
  }
  return true;
}

bool TensorView::inner_contiguous() const {
  return rank() == 0 || shape_.back() == 1 || strides_.back() == 1;
}

TensorView TensorView::slice(int d, int64_t begin, int64_t end) const {
  const int j = axis(d, "slice");
  if (begin < 0 || begin > end || end > shape_[j])
    throw Error("slice: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") out of bounds for dim " + std::to_string(d) + " of size " +
                std::to_string(shape_[j]));
  TensorView v = *this;
  v.shape_[j] = end - begin;
  v.numel_ = shape_numel(v.shape_);
  // An empty slice keeps the base pointer: nothing is read through it.
  if (begin < end)
    v.data_ = static_cast<const std::byte*>(data_) +
              begin * strides_[j] * static_cast<int64_t>(dtype_size(dtype_));
  return v;
}

TensorView TensorView::transpose(int a, int b) const {
  const int i = axis(a, "transpose"), j = axis(b, "transpose");
  TensorView v = *this;
  std::swap(v.shape_[i], v.shape_[j]);
  std::swap(v.strides_[i], v.strides_[j]);
  return v;
}

Tensor TensorView::contiguous() const {
  Tensor out(dtype_, shape_);
  if (numel_ == 0) return out;
  const int64_t item = static_cast<int64_t>(dtype_size(dtype_));
  const auto* src = static_cast<const std::byte*>(data_);
  std::byte* dst = out.raw();
  // Walk the elements in C order with an odometer over the index.
  Shape idx(shape_.size(), 0);
  int64_t off = 0;
  for (int64_t n = 0; n < numel_; ++n) {
    std::memcpy(dst + n * item, src + off * item, static_cast<size_t>(item));
    for (int d = rank() - 1; d >= 0; --d) {
      if (++idx[d] < shape_[d]) {
        off += strides_[d];
        break;
      }
      off -= (shape_[d] - 1) * strides_[d];
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace qkv
