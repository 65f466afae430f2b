/// @file
/// qkv/view.h: a non-owning, strided view of an n-d array.
///
/// What the attention op takes: a pointer, a dtype, a shape and strides, so a
/// caller passes a slice of its own buffer (a KV cache k[:, :, :len], a
/// transposed or Fortran-ordered array) without copying it first. A Tensor
/// converts to a view of its whole, C-ordered buffer.
///
/// Strides count ELEMENTS, not bytes (unlike NumPy), and may be any value:
/// negative, or 0 to broadcast one element along a dim. Element (i0, i1, ...)
/// lives at data + sum_d i_d * strides[d]. The viewed memory must outlive
/// every use of the view.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

/// Steps between neighbouring elements along each dim, in elements (not bytes).
using Strides = std::vector<int64_t>;

/// The strides of a C-ordered (row-major) array of this shape: [S*D, D, 1]
/// for [N, S, D].
QKV_API Strides c_strides(const Shape& shape);

/// A non-owning look at strided memory: pointer, dtype, shape and strides.
/// What the ops read; any Tensor converts to one.
class QKV_API TensorView {
 public:
  /// A null view: no data (an absent mask).
  TensorView() = default;
  /// Strides default to C order; otherwise one per dim. Throws qkv::Error if
  /// the counts differ or a dim is negative.
  TensorView(const void* data, DType dtype, Shape shape, Strides strides = {});
  /// The whole of `t`, C-ordered. Implicit, so an op taking views takes
  /// Tensors as before; `t` must outlive the view.
  TensorView(const Tensor& t);  // NOLINT(google-explicit-constructor)

  /// False for the null view.
  explicit operator bool() const { return data_ != nullptr; }

  DType dtype() const { return dtype_; }  ///< the element type
  const Shape& shape() const { return shape_; }  ///< the dims, outermost first
  const Strides& strides() const { return strides_; }  ///< one per dim, in elements
  int rank() const { return static_cast<int>(shape_.size()); }  ///< the number of dims
  int64_t dim(int i) const;     ///< negative i counts from the end, like NumPy
  int64_t stride(int i) const;  ///< the same for strides
  int64_t numel() const { return numel_; }  ///< the number of elements
  const void* raw() const { return data_; }  ///< element (0, ..., 0), untyped

  /// Typed access to element (0, ..., 0); throws qkv::Error if T does not
  /// match dtype().
  template <class T> const T* data() const;

  /// True when the elements are exactly a C-ordered block (dims of size 1
  /// may have any stride): the view could be a Tensor's buffer.
  bool is_contiguous() const;
  /// True when the last dim is contiguous (stride 1, or size 1): each row can
  /// be read as a plain array. A rank-0 view counts as inner-contiguous.
  bool inner_contiguous() const;

  /// Elements [begin, end) of dim `d` (negative d counts from the end); the
  /// other dims whole. Shares the memory: k.slice(-2, 0, len) is a KV cache's
  /// first len keys.
  TensorView slice(int d, int64_t begin, int64_t end) const;
  /// Dims a and b swapped (strides too): no data moves.
  TensorView transpose(int a, int b) const;

  /// An owning, C-ordered copy of the viewed elements.
  Tensor contiguous() const;

 private:
  int axis(int i, const char* what) const;

  const void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
  int64_t numel_ = 0;
};

template <class T>
const T* TensorView::data() const {
  if (dtype_ != dtype_of<T>())
    throw Error(std::string("view is ") + dtype_name(dtype_) + ", accessed as " +
                dtype_name(dtype_of<T>()));
  return static_cast<const T*>(data_);
}

}  // namespace qkv
