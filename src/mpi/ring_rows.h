// ring_rows.h: moving rows of the sequence dim between a rank's tensors and
// the blocks ring attention works on. A tensor [..., R, X] is `slabs` =
// numel / (R X) slabs of R rows of X elements; these copy rows
// [begin, begin + count) of every slab.
#pragma once

#include <cstring>

#include "qkv/tensor.h"

namespace qkv {

namespace detail {

// f(offset in the big tensor, offset in the block, size), in bytes, for
// every slab of a big tensor of `numel` elements whose slabs hold `rows`
// rows of `row_elems` elements.
template <class F>
void for_slabs(int64_t numel, int64_t rows, int64_t begin, int64_t count, int64_t row_elems,
               size_t elem, F f) {
  const int64_t slabs = rows * row_elems == 0 ? 0 : numel / (rows * row_elems);
  for (int64_t s = 0; s < slabs; ++s)
    f(static_cast<size_t>((s * rows + begin) * row_elems) * elem,
      static_cast<size_t>(s * count * row_elems) * elem, static_cast<size_t>(count * row_elems) * elem);
}

}  // namespace detail

// Rows [begin, begin + count) along dim -2 of t [..., R, X]: [..., count, X].
inline Tensor take_seq_rows(const Tensor& t, int64_t begin, int64_t count) {
  Shape s = t.shape();
  s[s.size() - 2] = count;
  Tensor out(t.dtype(), s);
  detail::for_slabs(t.numel(), t.dim(-2), begin, count, t.dim(-1), dtype_size(t.dtype()),
                    [&](size_t big, size_t small, size_t bytes) {
                      std::memcpy(out.raw() + small, t.raw() + big, bytes);
                    });
  return out;
}

// dst[..., at + i, :] = rows[..., i, :].
inline void put_seq_rows(Tensor& dst, int64_t at, const Tensor& rows) {
  detail::for_slabs(dst.numel(), dst.dim(-2), at, rows.dim(-2), dst.dim(-1), dtype_size(dst.dtype()),
                    [&](size_t big, size_t small, size_t bytes) {
                      std::memcpy(dst.raw() + big, rows.raw() + small, bytes);
                    });
}

// dst[..., at + i, :] += rows[..., i, :] (float32 or float64).
inline void add_seq_rows(Tensor& dst, int64_t at, const Tensor& rows) {
  detail::for_slabs(dst.numel(), dst.dim(-2), at, rows.dim(-2), dst.dim(-1), dtype_size(dst.dtype()),
                    [&](size_t big, size_t small, size_t bytes) {
                      auto add = [&](auto* d, const auto* r) {
                        for (size_t i = 0; i < bytes / sizeof(*d); ++i) d[i] += r[i];
                      };
                      if (dst.dtype() == DType::f64)
                        add(reinterpret_cast<double*>(dst.raw() + big),
                            reinterpret_cast<const double*>(rows.raw() + small));
                      else
                        add(reinterpret_cast<float*>(dst.raw() + big),
                            reinterpret_cast<const float*>(rows.raw() + small));
                    });
}

}  // namespace qkv
