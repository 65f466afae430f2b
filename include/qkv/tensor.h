/// @file
/// qkv/tensor.h: a dense, C-ordered, owning n-d array.
///
/// Deliberately small: a dtype, a shape and a contiguous buffer, in row-major
/// (C) order, so strides are derived from the shape and never stored. Ops
/// that read strided memory take a TensorView (qkv/view.h), which any Tensor
/// converts to.
///
/// Dimension glossary, used in every shape comment in qkv:
///   B    batch (any number of leading dims, written "...")
///   Hq   query heads          Hkv  key/value heads (Hq % Hkv == 0)
///   N    query length         S    key/value length
///   D    query/key head dim   Dv   value head dim
///   C    model width (d_model)
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.h"
#include "qkv/export.h"

namespace qkv {

/// bf16 (bfloat16): the top 16 bits of a float32 (8 exponent bits, 7 stored
/// mantissa bits), for storage only: kernels widen it to float32 to compute.
enum class DType {
  f32,      ///< float32
  f64,      ///< float64
  boolean,  ///< bool, one byte per element
  bf16,     ///< bfloat16
};

/// One bfloat16 value: its bits. No arithmetic on purpose; convert with
/// bf16_to_float / bf16_from_float.
struct bfloat16 {
  uint16_t bits;  ///< the float32's top 16 bits
};

/// Exact (every bf16 is a float32).
inline float bf16_to_float(bfloat16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

/// Round to nearest, ties to even (as vcvtneps2bf16 and PyTorch do). NaN
/// stays NaN (quiet, sign kept: rounding its payload could carry into the
/// exponent and make it Inf); Inf and +-0 are exact.
/// Branch-free, so loops of it vectorise.
inline bfloat16 bf16_from_float(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return {static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

/// The dims of an array, outermost first.
using Shape = std::vector<int64_t>;

/// "float32", "float64", "bool" (NumPy's names), "bfloat16" (PyTorch's).
QKV_API const char* dtype_name(DType dt);
/// Bytes per element: 4, 8, 1, 2.
QKV_API size_t dtype_size(DType dt);
/// "[2, 3, 4]"; "[]" for a scalar.
QKV_API std::string shape_str(const Shape& shape);
/// Product of the dims; throws qkv::Error if a dim is negative or it overflows.
QKV_API int64_t shape_numel(const Shape& shape);
/// The index of flat element i of a C-ordered `shape`, as "[0, 2, 1]" (for
/// error messages that point at one element).
QKV_API std::string index_str(const Shape& shape, int64_t i);

/// `bytes` of zeroed memory: a large block is fresh pages, which cost
/// nothing until written, in 2 MiB pages where the system has them (a
/// weight file's worth of 4 KiB page faults costs seconds); throws
/// std::bad_alloc.
QKV_API void* alloc_zeroed(size_t bytes);
/// Frees what alloc_zeroed(bytes) gave.
QKV_API void free_zeroed(void* p, size_t bytes) noexcept;

namespace detail {
/// Tensor storage: 64-byte aligned (whole cache lines, aligned SIMD loads),
/// and buffers of 2 MiB or more are 2 MiB aligned and offered to the kernel
/// as transparent huge pages (src/core/zeroed_memory.cpp says why). It
/// comes zeroed, large buffers as fresh pages nothing has touched yet, and
/// constructing an element without a value writes nothing: a Tensor of
/// zeros costs memory only where it is written.
void* storage_alloc(size_t bytes);
void storage_free(void* p, size_t bytes) noexcept;

template <class T>
struct StorageAllocator {
  using value_type = T;
  StorageAllocator() = default;
  template <class U>
  StorageAllocator(const StorageAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(storage_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { storage_free(p, n * sizeof(T)); }
  /// Value-initialisation (vector::resize) leaves storage_alloc's zeros.
  template <class U>
  void construct(U*) noexcept {}
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const StorageAllocator<U>&) const { return true; }
};
}  // namespace detail

/// The DType of a C++ element type: float, double, bool or bfloat16.
template <class T> constexpr DType dtype_of();
/// @cond specialisations
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::bf16; }
/// @endcond

/// An owning, C-ordered n-d array: a dtype, a shape and one buffer.
class QKV_API Tensor {
 public:
  Tensor() = default;
  /// Zero-filled (false for bool).
  Tensor(DType dtype, Shape shape);
  /// Defined in the library: copying and freeing go through its allocator
  /// (detail::storage_alloc), which the shared library does not export.
  Tensor(const Tensor&);
  Tensor(Tensor&&) noexcept;  ///< takes the buffer
  Tensor& operator=(const Tensor&);  ///< a copy of the buffer
  Tensor& operator=(Tensor&&) noexcept;  ///< takes the buffer
  ~Tensor();

  /// Copies `values` (row-major) into a new tensor of the given shape.
  template <class T>
  static Tensor from(Shape shape, const std::vector<T>& values);

  DType dtype() const { return dtype_; }  ///< the element type
  const Shape& shape() const { return shape_; }  ///< the dims, outermost first
  int rank() const { return static_cast<int>(shape_.size()); }  ///< the number of dims
  int64_t dim(int i) const;  ///< negative i counts from the end, like NumPy
  int64_t numel() const { return numel_; }  ///< the number of elements
  size_t nbytes() const { return storage_.size(); }  ///< the buffer's size in bytes
  bool empty() const { return numel_ == 0; }  ///< no elements (a dim is 0)

  /// Typed access; throws qkv::Error if T does not match dtype().
  template <class T> T* data();
  template <class T> const T* data() const;  ///< read-only, checked as the other
  std::byte* raw() { return storage_.data(); }  ///< the buffer, untyped
  const std::byte* raw() const { return storage_.data(); }  ///< the buffer, untyped

  /// Element i of a float tensor as double (f32, f64 or bf16).
  double get(int64_t i) const;

  /// Converts between float32, float64 and bfloat16 (to bf16: round to
  /// nearest even, from float64 via float32). A copy even when the type matches.
  Tensor to(DType dtype) const;
  /// Same data, new shape with the same number of elements.
  Tensor reshaped(Shape shape) const;

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  int64_t numel_ = 0;
  /// Bool is stored as one byte per element, matching NumPy's |b1.
  std::vector<std::byte, detail::StorageAllocator<std::byte>> storage_;
};

template <class T>
Tensor Tensor::from(Shape shape, const std::vector<T>& values) {
  Tensor t(dtype_of<T>(), std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw Error("Tensor::from: " + std::to_string(values.size()) +
                " values for shape " + shape_str(t.shape()));
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

template <class T>
T* Tensor::data() {
  if (dtype_ != dtype_of<T>())
    throw Error(std::string("tensor is ") + dtype_name(dtype_) + ", accessed as " +
                dtype_name(dtype_of<T>()));
  return reinterpret_cast<T*>(storage_.data());
}

template <class T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

}  // namespace qkv
