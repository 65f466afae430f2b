// gemm_dot_bf16.cpp: the bf16 dot-product GEMM on vdpbf16ps, 32 k (16
// pairs) a vector (contract in core/gemm_dot_kernels.h; blocks in
// kernels/gemm_dot_blocks.h). A row's k = 2l and 2l + 1 are lane l's pair
// as they lie in memory: bf16 rows need no packing. An odd K's last pair
// loads 0 beside its element, on both sides.
#include "core/gemm_dot_kernels.h"
#include "core/kernels/gemm_dot_blocks.h"
#include "core/kernels/gemm_kn_blocks.h"

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
  static V from_bits(__m512i x) { return reinterpret_cast<__m512bh>(x); }
};

// The same for B [K, N]: a step is two rows of B, k and k + 1, their
// elements interleaved into pairs. The unpacks work within 128-bit lanes:
// of 32 columns, the low halves' pairs hold columns 8g + q, the high
// halves' 8g + 4 + q (lane 4g + q), put back in order at the end.
struct Bf16Kn {
  using E = uint16_t;
  using B = __m512bh;
  using Mask = __mmask32;
  struct Step {
    __m512bh v[2];
  };
  static constexpr int64_t kCols = 32, kK = 2;
  static constexpr int kVecs = 2, kUnits = 2, kWideUnits = 4;
  template <int64_t rows>
  static Step load(const uint16_t* b, int64_t ldb, Mask m) {
    const __m512i r0 = _mm512_maskz_loadu_epi16(m, b);
    const __m512i r1 = rows > 1 ? _mm512_maskz_loadu_epi16(m, b + ldb) : _mm512_setzero_si512();
    return {{reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(r0, r1)),
             reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(r0, r1))}};
  }
  template <int64_t rows>
  static __m512bh pair(const uint16_t* a) {
    const uint32_t lo = a[0], hi = rows > 1 ? a[1] : 0u;
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(lo | hi << 16)));
  }
  static __m512 mac(__m512 acc, __m512bh a, __m512bh b) { return _mm512_dpbf16_ps(acc, a, b); }
  static void columns(const __m512 acc[2], __m512 out[2]) {
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    out[0] = _mm512_permutex2var_ps(acc[0], first, acc[1]);
    out[1] = _mm512_permutex2var_ps(acc[0], second, acc[1]);
  }
};

void gemm_kn_bf16(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float beta, const float* bias, float* C,
                  int64_t ldc) {
  kn::gemm<Bf16Kn>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

void gemm_dot_bf16(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, float beta, const float* bias, float* C,
                   int64_t ldc) {
  dot::gemm<Bf16>(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

}  // namespace

constinit const GemmDotKernels gemm_dot_avx512bf16{gemm_dot_f32_avx512, gemm_dot_bf16, gemm_kn_f32_avx512,
                                                   gemm_kn_bf16, gemm_panels_f32_avx512};

}  // namespace qkv::kernels
