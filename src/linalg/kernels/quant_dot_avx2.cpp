// The quantized dot products on AVX2 (compiled with -mavx2 -mfma -mf16c,
// run only from the avx2 path up). Each block's integer products are exact in int32
// lanes: vpmaddubsw multiplies an unsigned byte by a signed one (a signed
// weight rides on |w| and the activation with w's sign), adding pairs to
// int16 (never saturating: at most 2 · 128 · 127), vpmaddwd adds those
// pairs to int32 (times a sub-block's scale, for the K-quants). A block's
// eight int32 lanes then scale by its float scale into eight float32
// accumulators (four for Q4_K's and Q5_K's mins), summed across at the end: another order than the scalar
// path's, within the same bound (qkv/weight.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "linalg/half.h"
#include "linalg/kernels/quant_dot_x86.h"
#include "linalg/quant_dot.h"

namespace qkv::linalg {
namespace {

// Σ w x of 32 signed bytes each, as eight int32 lanes (w > -128 or x > -128).
__m256i dot_i8(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Q8_0 · Q8_0 (block: f16 d, then 32 int8), N rows against one x, a chain each.
struct DotQ8_0 {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    __m256 acc[N];
    for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < K / 32; ++i, w += 34, x += 34) {
      if constexpr (N == 1) prefetch_ahead<34>(w);  // one row a call: the one streaming from memory
      const __m256i xq = load32(x + 2);
      const float dx = scale_at(x);
      for (int r = 0; r < N; ++r) {
        const uint8_t* a = w + r * stride;
        const __m256 d = _mm256_set1_ps(scale_at(a) * dx);
        acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(load32(a + 2), xq)), acc[r]);
      }
    }
    for (int r = 0; r < N; ++r) out[r] = hsum(acc[r]);
  }
};

// Q4_0 · Q8_0: 16 bytes of nibbles, the low ones weights 0-15, the high
// ones 16-31, each less 8; N rows against one x. The nibbles (0..15) go
// into vpmaddubsw unsigned as they are, and the 8 comes off after: lane by
// lane Σ (q - 8) x = Σ q x - 8 Σ x, the same int32 lanes as a signed
// product's, with 8 Σ x worked out once per block for all N rows.
struct DotQ4_0 {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i eights = _mm256_set1_epi8(8), nibble_shift = _mm256_setr_epi64x(0, 0, 4, 4);
    __m256 acc[N];
    for (int r = 0; r < N; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < K / 32; ++i, w += 18, x += 34) {
      if constexpr (N == 1) prefetch_ahead<18>(w);  // one row a call: the one streaming from memory
      const __m256i xq = load32(x + 2);
      const __m256i x8 = _mm256_madd_epi16(_mm256_maddubs_epi16(eights, xq), ones);
      const float dx = scale_at(x);
      for (int r = 0; r < N; ++r) {
        const uint8_t* a = w + r * stride;
        // The 16 bytes in both lanes; the high lane shifted to its high nibbles.
        const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2)));
        const __m256i q = _mm256_and_si256(_mm256_srlv_epi64(raw, nibble_shift), low4);
        const __m256i qx = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), ones);
        const __m256 d = _mm256_set1_ps(scale_at(a) * dx);
        acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(qx, x8)), acc[r]);
      }
    }
    for (int r = 0; r < N; ++r) out[r] = hsum(acc[r]);
  }
};

// The 32 bits of the word at p as 32 bytes, byte j 16 where bit j is set
// (Q5_0's and Q5_1's fifth bits): each byte of the word spread over eight
// bytes (within each 128-bit lane: bytes 0, 1 to the low lane, 2, 3 to the
// high), then each of those tested against its own bit.
__m256i q5_high_bits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, sizeof qh);
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

// Q5_0 and Q5_1 · Q8_0: Q4_0's nibbles with a fifth bit each. Q5_0's q - 16
// is signed; Q5_1's q (0..31) multiplies x unsigned, and its offset m the
// block's Σ x (vpmaddubsw with ones).
template <bool kOffset>
float dot_q5(const void* w, const void* x, int64_t K) {
  constexpr int kBytes = kOffset ? 24 : 22, kQh = kOffset ? 4 : 2;
  const auto *a = static_cast<const uint8_t*>(w), *b = static_cast<const uint8_t*>(x);
  const __m256i low4 = _mm256_set1_epi8(15), ones16 = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < K / 32; ++i, a += kBytes, b += 34) {
    prefetch_ahead<kBytes>(a);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + kQh + 4));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
    const __m256i q = _mm256_or_si256(nib, q5_high_bits(a + kQh)), xq = load32(b + 2);
    const float dx = scale_at(b);
    if constexpr (kOffset) {
      const __m256i isum = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), ones16);
      const __m256i xsum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xq), ones16);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(a) * dx), _mm256_cvtepi32_ps(isum), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(a + 2) * dx), _mm256_cvtepi32_ps(xsum), acc);
    } else {
      const __m256i isum = dot_i8(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), xq);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(a) * dx), _mm256_cvtepi32_ps(isum), acc);
    }
  }
  return hsum(acc);
}

// The bit of each byte of qh that is set in `bit`, as 16 (Q5_K's fifth bit).
__m256i fifth_bit(__m256i qh, int j) {
  const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), _mm256_set1_epi8(16));
}

// vpshufb's mask that copies int16 element lo of the low 128-bit lane to
// all of that lane, and element hi of the high lane to all of that one: a
// sub-block's scale beside its 16 or 32 products, in one instruction
// rather than a scalar extract and a broadcast.
__m256i pick16(int lo, int hi) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * hi)),
                          _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * lo)));
}

// Q4_K and Q5_K · Q8_K: chunk c of 32 bytes holds sub-block 2c in its low
// nibbles and 2c + 1 in its high ones; sc scales each sub-block's sum in
// vpmaddwd. The mins' part, Σ_j m_j (bsums[2j] + bsums[2j + 1]), is four
// int32 lanes, scaled by dmin into four accumulators of their own.
template <bool kFifthBit>
float dot_q45_k(const void* w, const void* x, int64_t K) {
  constexpr int kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const auto* a = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8K*>(x);
  const __m256i low4 = _mm256_set1_epi8(15);
  __m256 acc = _mm256_setzero_ps();
  __m128 macc = _mm_setzero_ps();
  for (int64_t i = 0; i < K / 256; ++i, a += kBytes, ++y) {
    prefetch_ahead<kBytes>(a);
    const auto [sc_m, msum] = scales_and_mins(a, y);
    const __m256i scales = _mm256_permute2x128_si256(sc_m, sc_m, 0x00);  // in both lanes
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load32(a + 16);
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(a + kQs + 32 * c);
      __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFifthBit) {
        lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * c));
        hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * c + 1));
      }
      const __m256i plo = _mm256_maddubs_epi16(lo, load32(y->qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, load32(y->qs + 64 * c + 32));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_shuffle_epi8(scales, pick16(2 * c, 2 * c))));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_shuffle_epi8(scales, pick16(2 * c + 1, 2 * c + 1))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(a) * y->d), _mm256_cvtepi32_ps(isum), acc);
    macc = _mm_fmadd_ps(_mm_set1_ps(scale_at(a + 2) * y->d), _mm_cvtepi32_ps(msum), macc);
  }
  return hsum(acc) - hsum(macc);
}

// Q6_K · Q8_K: per half of 128 weights, quarter k's 32 six-bit weights are
// nibbles of ql (bytes 0-31 or 32-63, low or high) and bits 2k, 2k + 1 of
// qh; their sum spans two sub-blocks of 16 (one per 128-bit lane), scaled
// in vpmaddwd. The offset of 32 is one integer sum over bsums.
float dot_q6_k(const void* w, const void* x, int64_t K) {
  const auto* a = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8K*>(x);
  const __m256i low4 = _mm256_set1_epi8(15);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < K / 256; ++i, a += 210, ++y) {
    prefetch_ahead<210>(a);
    // 32 Σ_s scales[s] bsums[s], in eight int32 lanes, taken from the start.
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 192)));
    const __m256i offs = _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y->bsums)));
    __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offs, 5));
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load32(a + 64 * h), l1 = load32(a + 64 * h + 32), qh = load32(a + 128 + 32 * h);
      // This half's eight scales in both lanes.
      const __m256i scales = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00) : _mm256_permute2x128_si256(sc16, sc16, 0x11);
      for (int k = 0; k < 4; ++k) {
        const __m256i nib = _mm256_and_si256(k < 2 ? (k == 0 ? l0 : l1) : _mm256_srli_epi16(k == 2 ? l0 : l1, 4), low4);
        // Bits 2k, 2k + 1 of each qh byte moved to bits 4, 5 (never
        // across a byte: they are alone in it after the mask).
        const __m256i bits = _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(3 << (2 * k))));
        const __m256i top = k == 0 ? _mm256_slli_epi16(bits, 4)
                            : k == 1 ? _mm256_slli_epi16(bits, 2)
                            : k == 2 ? bits
                                     : _mm256_srli_epi16(bits, 2);
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_or_si256(nib, top), load32(y->qs + 128 * h + 32 * k));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, _mm256_shuffle_epi8(scales, pick16(2 * k, 2 * k + 1))));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale_at(a + 208) * y->d), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

// The dequantizers, for the float32 GEMM of long prompts: the reference
// dequantizers' bits (the same float products and differences, unfused),
// eight weights at a time.

// 8 bytes at p as eight float32 (signed or unsigned).
__m256 widen_i8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__m256 widen_u8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

void dequantize_q8_0(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  for (int64_t i = 0; i < n / 32; ++i, b += 34, out += 32) {
    const __m256 d = _mm256_set1_ps(f16_at(b));
    for (int j = 0; j < 32; j += 8)
      _mm256_storeu_ps(out + j, _mm256_mul_ps(widen_i8(reinterpret_cast<const int8_t*>(b + 2 + j)), d));
  }
}

void dequantize_q4_0(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  alignas(32) int8_t q[32];
  for (int64_t i = 0; i < n / 32; ++i, b += 18, out += 32) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(nib, _mm256_set1_epi8(8)));
    const __m256 d = _mm256_set1_ps(f16_at(b));
    for (int j = 0; j < 32; j += 8) _mm256_storeu_ps(out + j, _mm256_mul_ps(widen_i8(q + j), d));
  }
}

// Q4_K, and Q5_K with its fifth bits (kFifthBit).
template <bool kFifthBit>
void dequantize_q45_k(const void* blocks, float* out, int64_t n) {
  constexpr int kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const auto* b = static_cast<const uint8_t*>(blocks);
  alignas(32) uint8_t q[64];
  for (int64_t i = 0; i < n / 256; ++i, b += kBytes, out += 256) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const Scales8 s = unpack_scales(b + 4);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load32(b + 16);
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = load32(b + kQs + 32 * c);
      __m256i lo = _mm256_and_si256(raw, _mm256_set1_epi8(15));
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
      if constexpr (kFifthBit) {
        lo = _mm256_or_si256(lo, fifth_bit(qh, 2 * c));
        hi = _mm256_or_si256(hi, fifth_bit(qh, 2 * c + 1));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(q), lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32), hi);
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * c + h, shift = 8 * (j % 4);
        const auto sc = static_cast<float>((s.sc[j / 4] >> shift) & 0xff), m = static_cast<float>((s.m[j / 4] >> shift) & 0xff);
        const __m256 dj = _mm256_set1_ps(d * sc), mj = _mm256_set1_ps(dmin * m);
        for (int l = 0; l < 32; l += 8)
          _mm256_storeu_ps(out + 32 * j + l, _mm256_sub_ps(_mm256_mul_ps(dj, widen_u8(q + 32 * h + l)), mj));
      }
    }
  }
}

void dequantize_q6_k(const void* blocks, float* out, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(blocks);
  alignas(32) int8_t q[128];
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / 256; ++i, b += 210, out += 256) {
    const float d = f16_at(b + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32), qh = load32(b + 128 + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i nib = _mm256_and_si256(k < 2 ? (k == 0 ? l0 : l1) : _mm256_srli_epi16(k == 2 ? l0 : l1, 4), low4);
        const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), low2), 4);
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * k), _mm256_sub_epi8(_mm256_or_si256(nib, top), off));
      }
      for (int w = 0; w < 128; w += 8) {
        const __m256 dj = _mm256_set1_ps(d * static_cast<float>(scales[(128 * h + w) / 16]));
        _mm256_storeu_ps(out + 128 * h + w, _mm256_mul_ps(dj, widen_i8(q + w)));
      }
    }
  }
}

}  // namespace

const DotKernels dot_avx2 = {dot_rows<DotQ8_0>,
                             dot_rows<DotQ4_0>,
                             each_row<dot_q5<false>>,
                             each_row<dot_q5<true>>,
                             each_row<dot_q45_k<false>>,
                             each_row<dot_q45_k<true>>,
                             each_row<dot_q6_k>,
                             dequantize_q8_0,
                             dequantize_q4_0,
                             dequantize_q45_k<false>,
                             dequantize_q45_k<true>,
                             dequantize_q6_k,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             nullptr,
                             quantize_q8_0_x_avx2,
                             quantize_q8_k_avx2};

}  // namespace qkv::linalg
