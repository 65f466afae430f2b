// linear.cpp: matmul and Linear, the projections every attention lesson starts with.
#include <cmath>
#include <string>
#include <vector>

#include "qkv/modules.h"
#include "qkv/rng.h"

namespace qkv {
namespace {

void require_float(const Tensor& t, const std::string& what) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw Error(what + ": expected float32 or float64, found " + dtype_name(t.dtype()));
}

// x [R, K] · w [K, P] + bias [P] -> y [R, P]. Each output sums its K products
// in double, in order k = 0..K-1, adds the bias (like NumPy's x @ W + b) and
// is rounded to y's dtype once.
template <class TX, class TW>
void gemm(Tensor& y, const Tensor& x, const Tensor& w, const std::vector<double>& bias,
          int64_t R) {
  const int64_t K = w.dim(0), P = w.dim(1);
  const TX* X = x.data<TX>();
  const TW* W = w.data<TW>();
  TX* Y = y.data<TX>();
  std::vector<double> acc(P);
  for (int64_t r = 0; r < R; ++r) {
    std::fill(acc.begin(), acc.end(), 0.0);
    // k outermost walks W row by row; every acc[p] still sums k in order.
    for (int64_t k = 0; k < K; ++k) {
      const double xk = static_cast<double>(X[r * K + k]);
      const TW* wk = W + k * P;
      for (int64_t p = 0; p < P; ++p) acc[p] += xk * static_cast<double>(wk[p]);
    }
    for (int64_t p = 0; p < P; ++p)
      Y[r * P + p] = static_cast<TX>(bias.empty() ? acc[p] : acc[p] + bias[p]);
  }
}

// x [..., K] · w [K, P] (+ bias) -> [..., P] in x's dtype; arguments already checked.
Tensor project(const Tensor& x, const Tensor& w, const std::vector<double>& bias) {
  Shape shape = x.shape();
  shape.back() = w.dim(1);
  Tensor y(x.dtype(), shape);
  const int64_t R = shape_numel(Shape(shape.begin(), shape.end() - 1));
  const bool x64 = x.dtype() == DType::f64, w64 = w.dtype() == DType::f64;
  if (x64 && w64) gemm<double, double>(y, x, w, bias, R);
  else if (x64) gemm<double, float>(y, x, w, bias, R);
  else if (w64) gemm<float, double>(y, x, w, bias, R);
  else gemm<float, float>(y, x, w, bias, R);
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  require_float(a, "matmul: a");
  require_float(b, "matmul: b");
  if (b.rank() != 2)
    throw Error("matmul: expected b [K, P] with 2 dims, found " + shape_str(b.shape()));
  if (a.rank() < 1)
    throw Error("matmul: expected a [..., M, K] with at least 1 dim, found " + shape_str(a.shape()));
  if (a.dim(-1) != b.dim(0))
    throw Error("matmul: expected a's last dim K = " + std::to_string(b.dim(0)) + " (b " +
                shape_str(b.shape()) + "), found " + std::to_string(a.dim(-1)) + " in shape " +
                shape_str(a.shape()));
  return project(a, b, {});
}

Tensor Linear::forward(const Tensor& x) const {
  require_float(weight, "linear: weight");
  require_float(x, "linear: input");
  if (weight.rank() != 2)
    throw Error("linear: expected weight [in, out] with 2 dims, found " + shape_str(weight.shape()));
  if (x.rank() < 1 || x.dim(-1) != weight.dim(0))
    throw Error("linear: expected input last dim " + std::to_string(weight.dim(0)) + " (weight " +
                shape_str(weight.shape()) + "), found " +
                (x.rank() < 1 ? std::string("none") : std::to_string(x.dim(-1))) + " in shape " +
                shape_str(x.shape()));
  std::vector<double> b;
  if (!bias.empty()) {
    require_float(bias, "linear: bias");
    if (bias.rank() != 1 || bias.dim(0) != weight.dim(1))
      throw Error("linear: expected bias [" + std::to_string(weight.dim(1)) + "] (weight " +
                  shape_str(weight.shape()) + "), found " + shape_str(bias.shape()));
    b.resize(bias.numel());
    for (int64_t i = 0; i < bias.numel(); ++i) b[i] = bias.get(i);
  }
  return project(x, weight, b);
}

Linear Linear::init(int64_t in, int64_t out, bool bias, NumpyGenerator& rng) {
  if (in < 1 || out < 1)
    throw Error("linear: in and out must be at least 1, found in = " + std::to_string(in) +
                ", out = " + std::to_string(out));
  Linear lin;
  lin.weight = Tensor(DType::f64, {in, out});
  double* w = lin.weight.data<double>();
  // Divide (not multiply by 1/sqrt(in)) so every value rounds as NumPy's does.
  const double root = std::sqrt(static_cast<double>(in));
  for (int64_t i = 0; i < in * out; ++i) w[i] = rng.standard_normal() / root;
  if (bias) lin.bias = Tensor(DType::f64, {out});
  return lin;
}

}  // namespace qkv
