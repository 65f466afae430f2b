// strided.h: the same values as a Tensor, laid out differently in memory, for
// the view tests (test_tensor_view.cpp, test_attention_views.cpp).
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/view.h"

namespace qkv::test_strided {

// A buffer and a view of it that reads element for element as `t`. The
// buffer's dims are t's dims in `order` (order[0] outermost; {0, 1, ..., r-1}
// is C order, reversed is Fortran order), each `pad` elements longer than
// needed; the view starts `pad` elements into every padded dim. Padding holds
// NaN (float, bf16) or true (bool), so a kernel that reads outside the view, or a
// check that scans it, gives itself away.
struct Strided {
  Tensor buf;
  TensorView view;
};

inline Strided restride(const Tensor& t, const std::vector<int>& order, int64_t pad = 1) {
  const int r = t.rank();
  Shape bshape(r);
  for (int a = 0; a < r; ++a) bshape[a] = t.shape()[order[a]] + 2 * pad;
  Strided s{Tensor(t.dtype(), bshape), {}};
  const Strides bstr = c_strides(bshape);
  Strides strides(r);
  int64_t start = 0;
  for (int a = 0; a < r; ++a) {
    strides[order[a]] = bstr[a];
    start += pad * bstr[a];
  }
  const int64_t item = static_cast<int64_t>(dtype_size(t.dtype()));
  for (int64_t x = 0; x < s.buf.numel(); ++x) {
    if (t.dtype() == DType::f32) s.buf.data<float>()[x] = NAN;
    if (t.dtype() == DType::f64) s.buf.data<double>()[x] = NAN;
    if (t.dtype() == DType::boolean) s.buf.data<bool>()[x] = true;
    if (t.dtype() == DType::bf16) s.buf.data<bfloat16>()[x] = bf16_from_float(NAN);
  }
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t rem = n, off = start;
    for (int d = r - 1; d >= 0; --d) {
      off += (rem % t.shape()[d]) * strides[d];
      rem /= t.shape()[d];
    }
    std::memcpy(s.buf.raw() + off * item, t.raw() + n * item, static_cast<size_t>(item));
  }
  s.view = TensorView(s.buf.raw() + start * item, t.dtype(), t.shape(), strides);
  return s;
}

// Fortran order: the first dim varies fastest (NumPy's np.asfortranarray).
inline Strided fortran(const Tensor& t) {
  std::vector<int> order(t.rank());
  for (int a = 0; a < t.rank(); ++a) order[a] = t.rank() - 1 - a;
  return restride(t, order, 0);
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace qkv::test_strided
