// gemm_common.h: what sgemm and gemm_bf16 share (gemm.cpp).
#pragma once

#include <cstdint>
#include <utility>

#include "core/gemm_dot_kernels.h"
#include "core/runtime/parallel.h"

namespace qkv::linalg {

// Throws qkv::Error, prefixed with `fn`, on negative sizes or leading
// dimensions too small for the shapes.
void check_gemm_args(const char* fn, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     int64_t lda, int64_t ldb, int64_t ldc);

// The GEMMs with no products to sum, done as BLAS does them: nothing for an
// empty C, C = beta · C when K = 0 or alpha = 0 (beta = 0 writes zeros over
// any NaN). Returns false, touching nothing, for every other GEMM.
bool gemm_without_products(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C,
                           int64_t ldc);

// Thread t's columns [lo, hi) of N among `threads` for the dot-product
// kernels: contiguous, whole blocks of `block` columns (kDotBlockColumns
// for B [N, K], kKnBlockColumns for B [K, N]), empty for a thread with none.
std::pair<int64_t, int64_t> dot_range(int64_t N, int t, int threads,
                                       int64_t block = kernels::kDotBlockColumns);
constexpr int64_t kKnBlockColumns = 32;

// C [M, N] (rows ldc apart) += bias [N] on every row.
void add_bias(int64_t M, int64_t N, const float* bias, float* C, int64_t ldc);

}  // namespace qkv::linalg
