// flash_avx512.cpp: the micro-kernels on 16-lane AVX-512 vectors. Compiled
// with -mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma (CMakeLists.txt) and
// only ever called after qkv::active_isa() said the CPU has them.
#include <immintrin.h>

#include <cstdint>

#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {
namespace {

struct V {
  using reg = __m512;
  static constexpr int W = 16;
  // qk: 6 keys x 4 query vectors = 24 accumulators + 4 query vectors + 1
  // broadcast of the 32 zmm registers; 10 loads feed 24 FMAs.
  static constexpr int kQkJB = 6, kQkIV = 4;
  // pv: 6 rows x 4 value vectors (64 columns), the same register budget.
  static constexpr int kPvIB = 6, kPvEV = 4;

  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static reg load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(first(n), p); }
  static void store_n(float* p, reg v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg round(reg x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg pow2i(reg n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static reg zero_if_below(reg x, float t, reg y) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set1(t), _CMP_NLT_UQ), y);
  }
  static reg zero_if_neg_inf(reg x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set1(-__builtin_inff()), _CMP_NEQ_UQ), x);
  }
  static float hsum(reg x) { return _mm512_reduce_add_ps(x); }
};

#include "core/kernels/flash_simd.inc"

}  // namespace

const FlashKernels& avx512_kernels() {
  static const FlashKernels k{qk, qk_rows, softmax, pv, weights, probs, dscores, mac,
                              widen_bf16, check_scores};
  return k;
}

}  // namespace qkv::kernels
