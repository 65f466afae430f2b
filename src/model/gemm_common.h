// gemm_common.h: what sgemm and gemm_bf16 share (gemm.cpp).
#pragma once

#include <cstdint>

namespace qkv::kernels {

// Throws qkv::Error, prefixed with `fn`, on negative sizes or leading
// dimensions too small for the shapes.
void check_gemm_args(const char* fn, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     int64_t lda, int64_t ldb, int64_t ldc);

// C [M, N] = beta · C, with beta = 0 writing zeros (C may hold NaN): the
// whole GEMM when K = 0 or alpha = 0.
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc);

}  // namespace qkv::kernels
