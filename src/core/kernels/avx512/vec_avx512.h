// vec_avx512.h: 16 float32 lanes of AVX-512 as the vector type V of
// flash_simd.inc's contract, for the files compiled with the AVX-512 flags:
// the float32 micro-kernels (flash_avx512.cpp) and the bf16 softmax
// (avx512bf16/softmax_avx512bf16.cpp). In an anonymous namespace: each file
// compiles its own copy with its own -m flags, never merged by the linker.
#pragma once

#include <immintrin.h>

#include <cstdint>

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
  // x >= t ? p * 2^n : 0 (0 for NaN x), in one vscalefps: p * 2^n rounded
  // once, as a multiplication by 2^n would be.
  static reg ldexp_or_zero(reg p, reg n, reg x, float t) {
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, set1(t), _CMP_GE_OQ), p, n);
  }
  static reg zero_if_below(reg x, float t, reg y) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set1(t), _CMP_NLT_UQ), y);
  }
  static reg zero_if_neg_inf(reg x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set1(-__builtin_inff()), _CMP_NEQ_UQ), x);
  }
  static float hsum(reg x) { return _mm512_reduce_add_ps(x); }

  // Quads: 4 consecutive floats, 4 to a vector (softmax_quads).
  static constexpr int kQuads = 4;
  static reg load_quads(const float* p, int64_t ld, int n, float fill) {
    reg v = set1(fill);
    v = _mm512_mask_broadcast_f32x4(v, 0x000f, _mm_loadu_ps(p));
    if (n > 1) v = _mm512_mask_broadcast_f32x4(v, 0x00f0, _mm_loadu_ps(p + ld));
    if (n > 2) v = _mm512_mask_broadcast_f32x4(v, 0x0f00, _mm_loadu_ps(p + 2 * ld));
    if (n > 3) v = _mm512_mask_broadcast_f32x4(v, 0xf000, _mm_loadu_ps(p + 3 * ld));
    return v;
  }
  static void store_quads(float* p, int64_t ld, reg v, int n) {
    _mm_storeu_ps(p, _mm512_castps512_ps128(v));
    if (n > 1) _mm_storeu_ps(p + ld, _mm512_extractf32x4_ps(v, 1));
    if (n > 2) _mm_storeu_ps(p + 2 * ld, _mm512_extractf32x4_ps(v, 2));
    if (n > 3) _mm_storeu_ps(p + 3 * ld, _mm512_extractf32x4_ps(v, 3));
  }
  static reg broadcast_quad(const float* p) { return _mm512_broadcast_f32x4(_mm_loadu_ps(p)); }
  static void store_quad(float* p, reg v) { _mm_storeu_ps(p, _mm512_castps512_ps128(v)); }
  // Every quad becomes the element-wise max (sum) of all four.
  static reg quad_max(reg v) {
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
    return _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  }
  static reg quad_sum(reg v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
    return _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  }
};

}  // namespace
}  // namespace qkv::kernels
