// gemm_dot_avx512.cpp: the float32 dot-product GEMM on 16-lane AVX-512
// vectors (contract in core/gemm_dot_kernels.h; blocks in
// kernels/gemm_dot_blocks.h).
#include "core/gemm_dot_kernels.h"
#include "core/kernels/gemm_dot_blocks.h"

namespace qkv::kernels {
namespace {

struct F32 {
  using E = float;
  using V = __m512;
  static constexpr int64_t kWidth = 16;
  static V load(const float* p, int64_t n) {
    return n >= kWidth ? _mm512_loadu_ps(p)
                       : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static __m512 mac(__m512 acc, V a, V b) { return _mm512_fmadd_ps(a, b, acc); }
};

}  // namespace

void gemm_dot_f32_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                         int64_t lda, const float* B, int64_t ldb, float beta, const float* bias,
                         float* C, int64_t ldc) {
  dot::gemm<F32>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

constinit const GemmDotKernels gemm_dot_avx512{gemm_dot_f32_avx512, nullptr};

}  // namespace qkv::kernels
