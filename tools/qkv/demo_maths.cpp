#include "demo_maths.h"

#include <cmath>

namespace qkv::cli::demo {

Tensor normal(NumpyGenerator& rng, Shape shape, double scale) {
  Tensor t(DType::f64, std::move(shape));
  rng.normal(t.data<double>(), static_cast<size_t>(t.numel()), 0.0, scale);
  return t;
}

Tensor randn(NumpyRandomState& rs, Shape shape) {
  Tensor t(DType::f64, std::move(shape));
  rs.randn(t.data<double>(), static_cast<size_t>(t.numel()));
  return t;
}

Tensor map(const Tensor& t, const std::function<double(double)>& f) {
  Tensor out(DType::f64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<double>()[i] = f(t.get(i));
  return out;
}

Tensor transpose(const Tensor& m) {
  const int64_t R = m.dim(0), C = m.dim(1);
  Tensor out(DType::f64, {C, R});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out.data<double>()[c * R + r] = m.get(r * C + c);
  return out;
}

Tensor softmax_rows(const Tensor& x) {
  const int64_t n = x.dim(-1), rows = x.numel() / n;
  Tensor e(DType::f64, x.shape());
  double* p = e.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::fmax(m, x.get(r * n + j));
    for (int64_t j = 0; j < n; ++j) p[r * n + j] = std::exp(x.get(r * n + j) - m);
    const double sum = pairwise_sum(p + r * n, n);
    for (int64_t j = 0; j < n; ++j) p[r * n + j] /= sum;
  }
  return e;
}

Tensor where_allowed(const Tensor& allowed, const Tensor& scores) {
  const int64_t S = scores.dim(-1);
  const bool per_key = allowed.rank() == 1;  // [S], the same for every row
  if ((per_key && allowed.dim(0) != S) || (!per_key && allowed.shape() != scores.shape()))
    throw Error("where_allowed: mask " + shape_str(allowed.shape()) + " does not fit scores " +
                shape_str(scores.shape()));
  Tensor out = map(scores, [](double s) { return s; });
  for (int64_t i = 0; i < out.numel(); ++i)
    if (!allowed.data<bool>()[per_key ? i % S : i]) out.data<double>()[i] = -INFINITY;
  return out;
}

Tensor causal_mask(int64_t n) {
  Tensor m(DType::boolean, {n, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) m.data<bool>()[i * n + j] = true;
  return m;
}

Tensor row_sums(const Tensor& t) {
  const int64_t n = t.dim(-1), rows = t.numel() / n;
  const Tensor t64 = t.to(DType::f64);
  Tensor out(DType::f64, {rows});
  for (int64_t r = 0; r < rows; ++r)
    out.data<double>()[r] = pairwise_sum(t64.data<double>() + r * n, n);
  return out;
}

int64_t row_argmax(const Tensor& t, int64_t row) {
  const int64_t n = t.dim(-1);
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (t.get(row * n + j) > t.get(row * n + best)) best = j;
  return best;
}

Tensor row_max(const Tensor& t) {
  const int64_t n = t.dim(-1), rows = t.numel() / n;
  Tensor out(DType::f64, {rows});
  for (int64_t r = 0; r < rows; ++r) out.data<double>()[r] = t.get(r * n + row_argmax(t, r));
  return out;
}

// NumPy's pairwise_sum (numpy/_core/src/umath/loops_utils.h.src): below 8
// elements a plain loop; up to 128 eight interleaved partial sums combined as
// ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) plus the tail; above that, split at a
// multiple of 8 near the middle and recurse. Same order, same rounding.
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double numpy_std(const Tensor& x) {
  const Tensor x64 = x.to(DType::f64);
  const double n = static_cast<double>(x64.numel());
  const double mean = pairwise_sum(x64.data<double>(), x64.numel()) / n;
  const Tensor sq = map(x64, [&](double v) { return (v - mean) * (v - mean); });
  return std::sqrt(pairwise_sum(sq.data<double>(), sq.numel()) / n);
}

bool allclose(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (!(std::fabs(a.get(i) - b.get(i)) <= 1e-8 + 1e-5 * std::fabs(b.get(i)))) return false;
  return true;
}

}  // namespace qkv::cli::demo
