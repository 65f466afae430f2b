// demo_maths.h: the few array operations `qkv demo` needs, written the way
// the lessons' NumPy code computes them, so that the printed digits are
// NumPy's: draws in C order from NumPy's generators, softmax as
// exp(x - max) / sum, sums and standard deviations with NumPy's pairwise
// summation. All on float64 tensors of rank 1 or 2.
#pragma once

#include <cstdint>
#include <functional>

#include "qkv/rng.h"
#include "qkv/tensor.h"

namespace qkv::cli::demo {

// rng.normal(scale=scale, size=(rows, cols)), drawn in C order.
Tensor normal(NumpyGenerator& rng, Shape shape, double scale = 1.0);

// np.random.randn(rows, cols) from the legacy generator.
Tensor randn(NumpyRandomState& rs, Shape shape);

// f applied to every element.
Tensor map(const Tensor& t, const std::function<double(double)>& f);

// m [R, C] -> [C, R]
Tensor transpose(const Tensor& m);

// The lessons' softmax along the last axis: e = exp(x - row max), e / row sum.
// (qkv::softmax multiplies by 1/sum, which can differ in the last bit.)
Tensor softmax_rows(const Tensor& x);

// np.where(allowed, scores, -inf) for a bool `allowed` of the same shape, or
// of shape [S] broadcast over the rows of scores [N, S].
Tensor where_allowed(const Tensor& allowed, const Tensor& scores);

// np.tril(np.ones((n, n), dtype=bool)): query i may attend to keys j <= i.
Tensor causal_mask(int64_t n);

// Sum over the last axis (keepdims dropped): [N, S] -> [N], [S] -> [1].
Tensor row_sums(const Tensor& t);

// Index and value of each row's largest element (the first one on ties, like
// argmax): row i of [N, S].
int64_t row_argmax(const Tensor& t, int64_t row);
Tensor row_max(const Tensor& t);

// NumPy's sum of n contiguous doubles: pairwise, eight accumulators per block
// of up to 128, which is what np.sum does along a contiguous axis.
double pairwise_sum(const double* a, int64_t n);

// x.std() (population, ddof = 0) the way NumPy computes it.
double numpy_std(const Tensor& x);

// np.allclose(a, b) with its defaults: |a - b| <= 1e-8 + 1e-5 |b| everywhere.
bool allclose(const Tensor& a, const Tensor& b);

}  // namespace qkv::cli::demo
