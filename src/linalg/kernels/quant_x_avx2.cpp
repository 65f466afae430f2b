// Activations quantized to int8 on AVX2 (linalg/quant_dot.h): the bits of
// quantize_q8_0_x and quantize_q8_k (linalg/quant_dot_scalar.cpp), eight
// lanes at a time. A decode step quantizes every product's row of x on one
// thread while the other waits; the scalar rounding, a libm call a value,
// was 1.5% of a TinyLlama-shaped Q8_0 decode step.
//
// Built with -ffp-contract=off: the rounding takes x * id's float32 value,
// and a product fused into the subtraction after it would round ties apart.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "linalg/quant_dot.h"

namespace qkv::linalg {
namespace {

// No vector constant at namespace scope: its initialiser would run AVX
// at start-up, on CPUs without it too.
__m256 sign8() { return _mm256_set1_ps(-0.0f); }
__m256 abs8(__m256 v) { return _mm256_andnot_ps(sign8(), v); }

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Whether every lane is finite (a NaN compares false).
bool finite8(__m256 v) {
  return _mm256_movemask_ps(_mm256_cmp_ps(abs8(v), _mm256_set1_ps(INFINITY), _CMP_LT_OQ)) == 0xff;
}

// std::round's: half away from zero. v - trunc(v) is exact.
__m256 round_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(_mm256_and_ps(v, sign8()), _mm256_set1_ps(1.0f))));
}

// v within -127..127, NaN as 0: the scalar clamp_to. Only a block whose
// largest magnitude is under 2^-121 gets a 1 / d of inf, and so values
// outside the range; a plain conversion would make them INT_MIN.
__m256 clamp127(__m256 v) {
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  return _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(127.0f)), _mm256_set1_ps(-127.0f));
}

// Four vectors of eight integral floats in -127..127 as 32 int8 in order.
__m256i pack32(const __m256 r[4]) {
  __m256i i[4];
  for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(r[k]);
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

int hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void quantize_q8_0_x_avx2(const float* x, void* blocks, int64_t K) {
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < K / 32; ++i, x += 32, b += 34) {
    __m256 v[4];
    bool finite = true;
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      finite = finite && finite8(v[k]);
      amax = _mm256_max_ps(amax, abs8(v[k]));
    }
    if (!finite) {
      const uint16_t nan = 0x7e00;
      std::memcpy(b, &nan, 2);
      std::memset(b + 2, 0, 32);
      continue;
    }
    const float d = hmax(amax) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(b, &h, 2);
    __m256 r[4];
    for (int k = 0; k < 4; ++k) r[k] = round_away(clamp127(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + 2), pack32(r));
  }
}

void quantize_q8_k_avx2(const float* x, BlockQ8K* y, int64_t K) {
  for (int64_t i = 0; i < K / 256; ++i, x += 256, ++y) {
    bool finite = true;
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 8 * k);
      finite = finite && finite8(v);
      amax = _mm256_max_ps(amax, abs8(v));
    }
    if (!finite) {
      *y = BlockQ8K{NAN, {}, {}};
      continue;
    }
    const float m = hmax(amax);
    const __m256 id = _mm256_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
    y->d = m / 127.0f;
    for (int c = 0; c < 8; ++c) {  // 32 values: two sums of 16
      __m256 r[4];
      for (int k = 0; k < 4; ++k)
        r[k] = clamp127(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * k), id),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const __m256i q = pack32(r);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y->qs + 32 * c), q);
      const __m256i lo = _mm256_cvtepi8_epi32(_mm256_castsi256_si128(q)), hi = _mm256_cvtepi8_epi32(_mm_srli_si128(_mm256_castsi256_si128(q), 8));
      const __m128i q2 = _mm256_extracti128_si256(q, 1);
      const __m256i lo2 = _mm256_cvtepi8_epi32(q2), hi2 = _mm256_cvtepi8_epi32(_mm_srli_si128(q2, 8));
      y->bsums[2 * c] = static_cast<int16_t>(hsum(_mm256_add_epi32(lo, hi)));
      y->bsums[2 * c + 1] = static_cast<int16_t>(hsum(_mm256_add_epi32(lo2, hi2)));
    }
  }
}

}  // namespace qkv::linalg
