// linalg/kernels/quant_dot_x86.h: what the x86 dot kernels of
// linalg/quant_dot.h share: horizontal sums, f16 scales, the prefetch ahead
// of a streaming row, the dispatch on the rows a call, and Q4_K's and
// Q5_K's scales unpacked.
//
// Everything here has internal linkage on purpose: each kernel file is
// compiled for its own instruction set (-mavx2, -mavx512*), and an inline
// function with external linkage would be one symbol the linker picks from
// either file, so that the AVX2 path could run a copy the compiler
// vectorised for AVX-512 and fault on a CPU without it.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "linalg/quant_dot.h"

namespace qkv::linalg {
namespace {

inline float hsum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hsum(__m256 v) { return hsum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))); }

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The f16 scale at p as float32: F16C's conversion, exact, as the
// reference's half_to_float (the avx2 path requires F16C).
inline float scale_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

// A decode step's dots read one weight row after another, the thread's
// rows one stream of lines (linalg/weight_matmul.cpp). The hardware
// prefetcher follows it, but too close: the loads of every block still
// waited on memory. Each block therefore asks for the lines kAhead bytes
// further on (the rows are contiguous: past a row's end, the next row's);
// 1536 was the best of 512 to 4096, decoding TinyLlama's Q8_0, Q4_0 and
// Q4_K_M files 1.10-1.20x faster (AMD EPYC Zen 3, 2 threads). A prefetch
// never faults, past the end of the weights included (its address is
// made as an integer, not as a pointer past them).
// On Zen 4 the AVX512-VNNI Q8_0 dot, the one that streams fastest, gained
// from further still: 4096 bytes decoded TinyLlama's Q8_0 file 1.05x faster
// than 1536 (6 and 8 alternated rounds; 3072 1.05x, 6144 1.02-1.08x,
// 8192-16384 no better), while its Q4_0 and Q4_K_M files (bound more by
// their dots than by memory) and an 8B model's showed no difference within
// the noise (AMD EPYC Zen 4, 2 threads).
constexpr int kAhead = 1536;
constexpr int kAheadQ8_0 = 4096;
template <int kBytes, int kDistance = kAhead>
inline void prefetch_ahead(const uint8_t* block) {
  for (int b = 0; b < kBytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(block) + kDistance + b), _MM_HINT_T0);
}

// A DotFn of a kernel that takes N = 1..4 rows as a template argument.
template <class Kernel>
inline void dot_rows(const uint8_t* w, uint64_t stride, int n, const void* x, int64_t K, float* out) {
  const auto* b = static_cast<const uint8_t*>(x);
  switch (n) {
    case 4: Kernel::template run<4>(w, stride, b, K, out); return;
    case 3: Kernel::template run<3>(w, stride, b, K, out); return;
    case 2: Kernel::template run<2>(w, stride, b, K, out); return;
    default: Kernel::template run<1>(w, stride, b, K, out); return;
  }
}

// Q4_K's and Q5_K's 12 bytes of scales (linalg/k_scales.h) as two words
// of four bytes each for the scales, and two for the mins: byte j of
// sc[j / 4] is sub-block j's sc, byte j of m[j / 4] its m.
struct Scales8 {
  uint32_t sc[2], m[2];
};
inline Scales8 unpack_scales(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, sizeof u);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  return {{u[0] & k6, (u[2] & k4) | ((u[0] >> 6) & k2) << 4}, {u[1] & k6, ((u[2] >> 4) & k4) | ((u[1] >> 6) & k2) << 4}};
}

// A Q4_K or Q5_K block's (at a) eight scales and eight mins, as int16
// lanes 0-7 and 8-15, and the mins' part of its dot with y, Σ_j m_j
// (bsums[2j] + bsums[2j + 1]), as four int32 lanes.
struct ScalesAndMins {
  __m256i sc_m;
  __m128i msum;
};
// Vector shuffles rather than unpack_scales' words: a decode step makes
// this once per block of each row, and the words' twenty-odd scalar
// operations, inserts and a spill to the stack were a third of the block's
// work. Byte i of the 12 is s_i, at a + 4 + i:
//   sc_j = s_j & 63, m_j = s_{j+4} & 63                            (j < 4)
//   sc_j = (s_{j+4} & 15) | (s_{j-4} >> 6) << 4,
//   m_j = (s_{j+4} >> 4) | (s_j >> 6) << 4                        (j >= 4)
inline __m256i scales_mins16(const uint8_t* a) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));  // d, dmin, then the 12
  // Lanes: sc_0-3's, sc_4-7's low bits, m_0-3's, m_4-7's low bits (in the high nibble).
  const __m128i low = _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
  // Beside sc_4-7 and m_4-7: the bytes whose top two bits they take.
  const __m128i high = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
  const __m128i nibbles = _mm_blend_epi32(low, _mm_srli_epi16(low, 4), 0x8);  // m_4-7's down
  const __m128i bits = _mm_or_si128(
      _mm_and_si128(nibbles, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15)),
      _mm_and_si128(_mm_srli_epi16(high, 2), _mm_set1_epi8(0x30)));
  return _mm256_cvtepu8_epi16(bits);
}
// y's sums of each 32 (a sub-block's), eight int16 lanes.
inline __m128i sums32(const BlockQ8K* y) {
  return _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y->bsums)),
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(y->bsums + 8)));
}
inline ScalesAndMins scales_and_mins(const uint8_t* a, const BlockQ8K* y) {
  const __m256i sc_m = scales_mins16(a);
  return {sc_m, _mm_madd_epi16(_mm256_extracti128_si256(sc_m, 1), sums32(y))};
}

}  // namespace
}  // namespace qkv::linalg
