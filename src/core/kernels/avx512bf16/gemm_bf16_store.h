// gemm_bf16_store.h: how a block of gemm_bf16's float32 sums lands in C, one
// copy for both kernels that compute them (gemm_bf16_avx512.cpp in
// registers, gemm_bf16_amx.cpp from tiles), so both round alike. Inline
// AVX-512 code: include it only from files compiled with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qkv::kernels::bf16gemm {

// The first n lanes of 16 (all when n >= 16).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// C's lanes m at cp = alpha * acc, then + beta * C by one FMA (use_beta
// false never reads C), then + bias (when use_bias), each rounded to float32.
// Everything by value: a pointer to the bias vector kept it in memory.
inline void store_c(float* cp, __mmask16 m, __m512 acc, __m512 va, __m512 vb, bool use_beta,
                    bool use_bias, __m512 bias) {
  __m512 y = _mm512_mul_ps(va, acc);
  if (use_beta) y = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, cp), y);
  if (use_bias) y = _mm512_add_ps(y, bias);
  _mm512_mask_storeu_ps(cp, m, y);
}

}  // namespace qkv::kernels::bf16gemm
