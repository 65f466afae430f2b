// bf16_pairs_avx512.h: the pair words vdpbf16ps multiplies, made from two
// float32 vectors. Shared by the attention's P·V (core/kernels/avx512bf16)
// and the bf16 GEMM (core/kernels/avx512bf16/gemm_bf16_avx512.cpp); only for files compiled
// with -mavx512bw -mavx512bf16, run after active_isa() found AVX512-BF16.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qkv::simd {

// The 16 words (bf16(a[i]) low, bf16(b[i]) high), rounded to nearest even
// (NaN kept): lane i pairs element i of two rows.
inline __m512i bf16_pair_words(__m512 a, __m512 b) {
  // cvtne2ps_pbh(b, a) holds a's 16 values then b's; this index interleaves
  // them into 16 words.
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave),
                                  (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

}  // namespace qkv::simd
