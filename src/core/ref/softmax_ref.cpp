#include "core/ref/softmax_ref.h"

#include <cmath>

#include "qkv/softmax.h"

namespace qkv::ref {

double softmax_row(const double* s, double* p, int64_t n) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::fmax(m, s[j]);
  if (m == -INFINITY) {
    for (int64_t j = 0; j < n; ++j) p[j] = 0.0;
    return -INFINITY;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(s[j] - m);  // exp(-inf) == 0 for blocked entries
    sum += p[j];
  }
  const double inv = 1.0 / sum;  // sum >= 1: the max entry contributes exp(0)
  for (int64_t j = 0; j < n; ++j) p[j] *= inv;
  return m + std::log(sum);
}

}  // namespace qkv::ref

namespace qkv {

Tensor softmax(const Tensor& x) {
  if (x.dtype() == DType::boolean)
    throw Error("softmax: expected float32 or float64, found bool");
  if (x.rank() == 0) throw Error("softmax: expected at least 1 dim, found a scalar");
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double xi = x.get(i);
    if (std::isnan(xi) || xi == INFINITY)
      throw Error(std::string("softmax: values must be finite or -inf, found ") +
                  (std::isnan(xi) ? "NaN" : "+inf") + " at " + index_str(x.shape(), i));
  }
  const int64_t n = x.dim(-1);
  Tensor y(DType::f64, x.shape());
  double* out = y.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = x.get(i);
  for (int64_t r = 0; n > 0 && r < x.numel() / n; ++r) ref::softmax_row(out + r * n, out + r * n, n);
  return x.dtype() == DType::f64 ? y : y.to(DType::f32);
}

}  // namespace qkv
