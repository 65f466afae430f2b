// flash_avx2.cpp: the micro-kernels on 8-lane AVX2 vectors with FMA.
// Compiled with -mavx2 -mfma (CMakeLists.txt) and only ever called after
// qkv::active_isa() said the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/kernels/flash_kernels.h"
#include "core/kernels/softmax_column.h"

namespace qkv::kernels {
namespace {

struct V {
  using reg = __m256;
  static constexpr int W = 8;
  // 16 ymm registers: qk 6 keys x 2 query vectors = 12 accumulators + 2
  // query vectors + 1 broadcast; pv 6 rows x 2 value vectors likewise.
  static constexpr int kQkJB = 6, kQkIV = 2;
  static constexpr int kPvIB = 6, kPvEV = 2;

  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg load_n(const float* p, int n) { return _mm256_maskload_ps(p, first(n)); }
  static void store_n(float* p, reg v, int n) { _mm256_maskstore_ps(p, first(n), v); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg round(reg x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // x >= t ? p * 2^n : 0 (n integral; 0 for NaN x, whose clamped n of -127
  // builds 2^n = +0): 2^n built in the exponent field.
  static reg ldexp_or_zero(reg p, reg n, reg x, float t) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return zero_if_below(x, t, _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23))));
  }
  static reg zero_if_below(reg x, float t, reg y) {
    return _mm256_and_ps(_mm256_cmp_ps(x, set1(t), _CMP_NLT_UQ), y);
  }
  static reg zero_if_neg_inf(reg x) {
    return _mm256_and_ps(_mm256_cmp_ps(x, set1(-__builtin_inff()), _CMP_NEQ_UQ), x);
  }
  static float hsum(reg x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Quads: 4 consecutive floats, 2 to a vector (softmax_quads).
  static constexpr int kQuads = 2;
  static reg load_quads(const float* p, int64_t ld, int n, float fill) {
    return _mm256_set_m128(n > 1 ? _mm_loadu_ps(p + ld) : _mm_set1_ps(fill), _mm_loadu_ps(p));
  }
  static void store_quads(float* p, int64_t ld, reg v, int n) {
    _mm_storeu_ps(p, _mm256_castps256_ps128(v));
    if (n > 1) _mm_storeu_ps(p + ld, _mm256_extractf128_ps(v, 1));
  }
  static reg broadcast_quad(const float* p) { return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p)); }
  static void store_quad(float* p, reg v) { _mm_storeu_ps(p, _mm256_castps256_ps128(v)); }
  // Both quads become the element-wise max (sum) of the two.
  static reg quad_max(reg v) { return _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1)); }
  static reg quad_sum(reg v) { return _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 1)); }
};

#include "core/kernels/flash_simd.inc"

}  // namespace

constinit const FlashKernels flash_avx2{qk, qk_rows, softmax, pv, weights,
                                 probs, dscores, mac, widen_bf16, check_scores};

}  // namespace qkv::kernels
