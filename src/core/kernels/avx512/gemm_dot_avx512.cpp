// gemm_dot_avx512.cpp: the float32 dot-product GEMM on 16-lane AVX-512
// vectors (contract in core/gemm_dot_kernels.h; blocks in
// kernels/gemm_dot_blocks.h).
#include "core/gemm_dot_kernels.h"
#include "core/kernels/gemm_dot_blocks.h"
#include "core/kernels/gemm_kn_blocks.h"

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
  static V from_bits(__m512i x) { return _mm512_castsi512_ps(x); }
};

// The same for B [K, N]: a step is one row of B, 16 columns a vector.
struct F32Kn {
  using E = float;
  using B = __m512;
  using Mask = __mmask16;
  struct Step {
    __m512 v[1];
  };
  static constexpr int64_t kCols = 16, kK = 1;
  static constexpr int kVecs = 1, kUnits = 4, kWideUnits = 8;
  template <int64_t rows>
  static Step load(const float* b, int64_t, Mask m) {
    return {{_mm512_maskz_loadu_ps(m, b)}};
  }
  template <int64_t rows>
  static __m512 pair(const float* a) {
    return _mm512_set1_ps(*a);
  }
  static __m512 mac(__m512 acc, __m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, acc); }
  static void columns(const __m512 acc[1], __m512 out[1]) { out[0] = acc[0]; }
};

}  // namespace

void gemm_dot_f32_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                         int64_t lda, const float* B, int64_t ldb, float beta, const float* bias,
                         float* C, int64_t ldc) {
  dot::gemm<F32>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

void gemm_kn_f32_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, const float* bias,
                        float* C, int64_t ldc) {
  kn::gemm<F32Kn>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

constinit const GemmDotKernels gemm_dot_avx512{gemm_dot_f32_avx512, nullptr, gemm_kn_f32_avx512, nullptr,
                                             gemm_panels_f32_avx512};

}  // namespace qkv::kernels
