// gemm_dot_bf16.cpp: the bf16 dot-product GEMM on vdpbf16ps, 32 k (16
// pairs) a vector (contract in core/gemm_dot_kernels.h; blocks in
// kernels/gemm_dot_blocks.h). A row's k = 2l and 2l + 1 are lane l's pair
// as they lie in memory: bf16 rows need no packing. An odd K's last pair
// loads 0 beside its element, on both sides.
#include "core/gemm_dot_kernels.h"
#include "core/kernels/gemm_dot_blocks.h"

namespace qkv::kernels {
namespace {

struct Bf16 {
  using E = uint16_t;
  using V = __m512bh;
  static constexpr int64_t kWidth = 32;
  static V load(const uint16_t* p, int64_t n) {
    const __m512i x = n >= kWidth ? _mm512_loadu_si512(p)
                                  : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << n) - 1u), p);
    return reinterpret_cast<__m512bh>(x);
  }
  static __m512 mac(__m512 acc, V a, V b) { return _mm512_dpbf16_ps(acc, a, b); }
};

void gemm_dot_bf16(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, float beta, const float* bias, float* C,
                   int64_t ldc) {
  dot::gemm<Bf16>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

}  // namespace

constinit const GemmDotKernels gemm_dot_avx512bf16{gemm_dot_f32_avx512, gemm_dot_bf16};

}  // namespace qkv::kernels
