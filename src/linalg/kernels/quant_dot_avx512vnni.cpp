// The quantized dot products on AVX512-VNNI (compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni, beside -mavx2 -mfma -mf16c; run from
// the avx512 path up on a CPU that has AVX512-VNNI, linalg/quant_dot.h).
// Each 512-bit step takes 64 weights: two Q8_0 or Q4_0 blocks, two
// sub-blocks of a Q4_K or Q5_K block, two quarters of a Q6_K half.
//   - Q8_0 and Q4_0: vpdpbusd multiplies unsigned bytes by signed ones and
//     adds each four products to an int32 lane, replacing AVX2's vpmaddubsw
//     and vpmaddwd. Q8_0's signed weights ride on |w| with x carrying w's
//     sign; Q4_0's nibbles go in unsigned, and the lanes start from -8 Σ x.
//   - The K-quants keep vpmaddubsw's int16 pairs (each sub-block's products
//     in lanes of their own) and add them times the sub-block's scale with
//     vpdpwssd, replacing vpmaddwd and the add.
// The integer sums are the AVX2 path's, exact; only the float sums over
// blocks run in another order (16 lanes, not 8), within the same bound
// (qkv/weight.h). Q5_0, Q5_1 and the dequantizers stay AVX2's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "linalg/kernels/quant_dot_x86.h"
#include "linalg/quant_dot.h"

namespace qkv::linalg {
namespace {

__m512i load64(const void* p) { return _mm512_loadu_si512(p); }
__m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// 32 bytes at p and 32 at p + next as one vector (two blocks' quants).
__m512i load_two(const uint8_t* p, int next) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load32(p)), load32(p + next), 1);
}

// The f16 scales at p and p + next: eight lanes of the first, eight of the
// second, beside two blocks' int32 lanes.
__m512 scales_of_two(const uint8_t* p, int next) {
  uint16_t a, b;
  std::memcpy(&a, p, sizeof a);
  std::memcpy(&b, p + next, sizeof b);
  const __m128 s = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | static_cast<uint32_t>(b) << 16)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(s));
}

// Q8_0 · Q8_0, N rows against one x, a chain each: two blocks a step, an
// odd last block in 256 bits.
struct DotQ8_0 {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    const int64_t blocks = K / 32;
    __m512 acc[N];
    for (int r = 0; r < N; ++r) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= blocks; i += 2, w += 68, x += 68) {
      if constexpr (N == 1) prefetch_ahead<68>(w);  // one row a call: the one streaming from memory
      const __m512i xq = load_two(x + 2, 34);
      const __m512 dx = scales_of_two(x, 34);
      for (int r = 0; r < N; ++r) {
        const uint8_t* a = w + r * stride;
        const __m512i q = load_two(a + 2, 34);
        const __m512i sx = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(q), _mm512_setzero_si512(), xq);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), sx);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(scales_of_two(a, 34), dx), _mm512_cvtepi32_ps(p), acc[r]);
      }
    }
    for (int r = 0; r < N; ++r) {
      out[r] = _mm512_reduce_add_ps(acc[r]);
      if (i < blocks) {
        const uint8_t* a = w + r * stride;
        const __m256i q = load32(a + 2), xq = load32(x + 2);
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(xq, q));
        out[r] += hsum(_mm256_mul_ps(_mm256_set1_ps(scale_at(a) * scale_at(x)), _mm256_cvtepi32_ps(p)));
      }
    }
  }
};

// Q4_0 · Q8_0: a block's 16 bytes of nibbles are weights 0-15 (low) and
// 16-31 (high), each less 8. Two blocks a step: each block's bytes in two
// 128-bit lanes, the second shifted to its high nibbles. Lane by lane
// Σ (q - 8) x = Σ q x - 8 Σ x: vpdpbusd adds the nibbles' products to
// lanes that start at -8 Σ x, worked out once per step for all N rows.
struct DotQ4_0 {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    const int64_t blocks = K / 32;
    const __m512i low4 = _mm512_set1_epi8(15), eights = _mm512_set1_epi8(8);
    const __m512i high_lanes = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    __m512 acc[N];
    for (int r = 0; r < N; ++r) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= blocks; i += 2, w += 36, x += 68) {
      if constexpr (N == 1) prefetch_ahead<36>(w);  // one row a call: the one streaming from memory
      const __m512i xq = load_two(x + 2, 34);
      const __m512 dx = scales_of_two(x, 34);
      const __m512i minus_8x = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, xq));
      for (int r = 0; r < N; ++r) {
        const uint8_t* a = w + r * stride;
        const __m512i raw = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(load16(a + 2))),
                                               _mm256_broadcastsi128_si256(load16(a + 20)), 1);
        const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(raw, high_lanes), low4);
        const __m512i p = _mm512_dpbusd_epi32(minus_8x, q, xq);
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(scales_of_two(a, 18), dx), _mm512_cvtepi32_ps(p), acc[r]);
      }
    }
    for (int r = 0; r < N; ++r) {
      out[r] = _mm512_reduce_add_ps(acc[r]);
      if (i < blocks) {
        const uint8_t* a = w + r * stride;
        const __m128i raw = load16(a + 2);
        const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
        const __m256i xq = load32(x + 2);
        const __m256i x8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), xq);
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, xq), x8);
        out[r] += hsum(_mm256_mul_ps(_mm256_set1_ps(scale_at(a) * scale_at(x)), _mm256_cvtepi32_ps(p)));
      }
    }
  }
};

// vpshufb's mask that copies int16 element e[l] of each 128-bit lane l to
// all of that lane: a sub-block's scale beside its products.
__m512i pick16(int e0, int e1, int e2, int e3) {
  auto m = [](int e) { return _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * e)); };
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(m(e1), m(e0))), _mm256_set_m128i(m(e3), m(e2)), 1);
}

// Q4_K and Q5_K · Q8_K: chunk c of 32 bytes holds sub-block 2c in its low
// nibbles and 2c + 1 in its high ones, so one step puts the chunk in both
// halves, the high half shifted, and meets x's 64 bytes as they lie. Q5_K's
// fifth bit of sub-block j is bit j of each of its 32 bytes of qh. The
// mins' part, Σ_j m_j (bsums[2j] + bsums[2j + 1]), is AVX2's.
template <bool kFifthBit>
float dot_q45_k(const void* w, const void* x, int64_t K) {
  constexpr int kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const auto* a = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8K*>(x);
  const __m512i low4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
  const __m512i high_half = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const __m512i pick[4] = {pick16(0, 0, 1, 1), pick16(2, 2, 3, 3), pick16(4, 4, 5, 5), pick16(6, 6, 7, 7)};
  __m512 acc = _mm512_setzero_ps();
  __m128 macc = _mm_setzero_ps();
  for (int64_t i = 0; i < K / 256; ++i, a += kBytes, ++y) {
    prefetch_ahead<kBytes>(a);
    const auto [sc_m, msum] = scales_and_mins(a, y);
    const __m512i scales = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc_m));  // in every lane
    __m512i qh = _mm512_setzero_si512();
    if constexpr (kFifthBit) qh = _mm512_broadcast_i64x4(load32(a + 16));
    __m512i isum = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = _mm512_broadcast_i64x4(load32(a + kQs + 32 * c));
      __m512i q = _mm512_and_si512(_mm512_srlv_epi64(raw, high_half), low4);  // sub-blocks 2c, 2c + 1
      if constexpr (kFifthBit) {
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << 2 * c)),
                                               _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
        q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, sixteen);
      }
      const __m512i p16 = _mm512_maddubs_epi16(q, load64(y->qs + 64 * c));
      isum = _mm512_dpwssd_epi32(isum, p16, _mm512_shuffle_epi8(scales, pick[c]));
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(scale_at(a) * y->d), _mm512_cvtepi32_ps(isum), acc);
    macc = _mm_fmadd_ps(_mm_set1_ps(scale_at(a + 2) * y->d), _mm_cvtepi32_ps(msum), macc);
  }
  return _mm512_reduce_add_ps(acc) - hsum(macc);
}

// Q6_K · Q8_K: half h's 64 bytes of ql hold quarters 0 and 1 in their low
// nibbles and 2 and 3 in their high ones, so one load meets x's 64 bytes
// of two quarters as they lie; quarter k's top two bits are bits 2k, 2k + 1
// of the half's 32 bytes of qh. Each 128-bit lane is one sub-block of 16,
// scaled in vpdpwssd by its own scale (vpermw picks four at a time). The
// offset of 32 is one integer sum over bsums, where the lanes start.
float dot_q6_k(const void* w, const void* x, int64_t K) {
  const auto* a = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8K*>(x);
  const __m512i low4 = _mm512_set1_epi8(15);
  // Quarters (0, 1): bits 0-1 and 2-3 of qh to bits 4-5; quarters (2, 3):
  // bits 4-5 stay, 6-7 move down two (each alone in its byte once masked).
  const __m512i mask01 = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0c), 1);
  const __m512i mask23 = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8(static_cast<char>(0xc0)), 1);
  const __m512i up01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i down23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  // vpermw indices: lane l of group g gets scale 4g + l.
  __m512i group[4];
  for (int g = 0; g < 4; ++g)
    group[g] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(4 * g + 1)),
                                                                          _mm_set1_epi16(static_cast<int16_t>(4 * g)))),
                                  _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(4 * g + 3)),
                                                   _mm_set1_epi16(static_cast<int16_t>(4 * g + 2))),
                                  1);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < K / 256; ++i, a += 210, ++y) {
    prefetch_ahead<210>(a);
    const __m256i sc16 = _mm256_cvtepi8_epi16(load16(a + 192));
    // -32 Σ_s scales[s] bsums[s], in eight int32 lanes, where the sums start.
    const __m256i offs = _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y->bsums)));
    __m512i isum = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offs, 5)));
    const __m512i scales = _mm512_zextsi256_si512(sc16);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = load64(a + 64 * h), qh = _mm512_broadcast_i64x4(load32(a + 128 + 32 * h));
      const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                          _mm512_sllv_epi16(_mm512_and_si512(qh, mask01), up01));
      const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                          _mm512_srlv_epi16(_mm512_and_si512(qh, mask23), down23));
      const __m512i p01 = _mm512_maddubs_epi16(q01, load64(y->qs + 128 * h));
      const __m512i p23 = _mm512_maddubs_epi16(q23, load64(y->qs + 128 * h + 64));
      isum = _mm512_dpwssd_epi32(isum, p01, _mm512_permutexvar_epi16(group[2 * h], scales));
      isum = _mm512_dpwssd_epi32(isum, p23, _mm512_permutexvar_epi16(group[2 * h + 1], scales));
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(scale_at(a + 208) * y->d), _mm512_cvtepi32_ps(isum), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace

// Null: the avx2 path's (linalg/quant_dot_scalar.cpp fills them in).
const DotKernels dot_avx512vnni = {dot_rows<DotQ8_0>,
                                   dot_rows<DotQ4_0>,
                                   nullptr,
                                   nullptr,
                                   each_row<dot_q45_k<false>>,
                                   each_row<dot_q45_k<true>>,
                                   each_row<dot_q6_k>,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr};

}  // namespace qkv::linalg
