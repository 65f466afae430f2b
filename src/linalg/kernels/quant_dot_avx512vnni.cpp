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
// Each block's integer sum is exact, as on the AVX2 path, but spread over
// 16 int32 lanes rather than 8: the lanes are converted and summed in
// another order, within the same bound (qkv/weight.h). Q5_0, Q5_1 and the
// dequantizers stay AVX2's.
// Every kernel is a tile of N weight rows by M rows of x: a decode step's
// dots are M = 1 (and N = 1 for the row that streams from memory), a
// prompt's rows take 4 by 4 (linalg/weight_matmul.cpp), each weight row
// unpacked once for the four rows of x; each pair's operations are the
// same at any N and M, so its bits are too.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "linalg/kernels/quant_dot_x86.h"
#include "linalg/quant_dot.h"
#include "linalg/quant_panel.h"

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

// Q8_0 · Q8_0, N weight rows against M rows of x (row m's blocks at
// x + m * x_stride), a chain each pair: two blocks a step, an odd last
// block in 256 bits. A decode step's dots are M = 1; a prompt's rows take
// M = 4, each weight row's |w| and sign and each x row's scales made once
// per step for the whole tile. Each pair's operations are the same
// whatever N and M, and so are its bits.
template <int N, int M>
void q8_0_tile(const uint8_t* w, uint64_t stride, const uint8_t* x, uint64_t x_stride, int64_t K, float* out,
               int64_t ldo) {
  const int64_t blocks = K / 32;
  __m512 acc[M][N];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= blocks; i += 2) {
    if constexpr (N == 1 && M == 1) prefetch_ahead<68, kAheadQ8_0>(w + 34 * i);  // the row streaming from memory
    __m512i aq[N];
    __mmask64 neg[N];
    __m512 dw[N];
    for (int r = 0; r < N; ++r) {
      const uint8_t* a = w + r * stride + 34 * i;
      const __m512i q = load_two(a + 2, 34);
      aq[r] = _mm512_abs_epi8(q);
      neg[r] = _mm512_movepi8_mask(q);
      dw[r] = scales_of_two(a, 34);
    }
    for (int m = 0; m < M; ++m) {
      const uint8_t* b = x + m * x_stride + 34 * i;
      const __m512i xq = load_two(b + 2, 34);
      const __m512 dx = scales_of_two(b, 34);
      for (int r = 0; r < N; ++r) {
        const __m512i sx = _mm512_mask_sub_epi8(xq, neg[r], _mm512_setzero_si512(), xq);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aq[r], sx);
        acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(p), acc[m][r]);
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < N; ++r) {
      float& o = out[m * ldo + r];
      o = _mm512_reduce_add_ps(acc[m][r]);
      if (i < blocks) {  // an odd last block
        const uint8_t *a = w + r * stride + 34 * i, *b = x + m * x_stride + 34 * i;
        const __m256i q = load32(a + 2), xq = load32(b + 2);
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(xq, q));
        o += hsum(_mm256_mul_ps(_mm256_set1_ps(scale_at(a) * scale_at(b)), _mm256_cvtepi32_ps(p)));
      }
    }
}

// Q4_0 · Q8_0, as Q8_0's tiles: a block's 16 bytes of nibbles are weights
// 0-15 (low) and 16-31 (high), each less 8. Two blocks a step: each
// block's bytes in two 128-bit lanes, the second shifted to its high
// nibbles. Lane by lane Σ (q - 8) x = Σ q x - 8 Σ x: vpdpbusd adds the
// nibbles' products to lanes that start at -8 Σ x, worked out once per
// step for each row of x.
template <int N, int M>
void q4_0_tile(const uint8_t* w, uint64_t stride, const uint8_t* x, uint64_t x_stride, int64_t K, float* out,
               int64_t ldo) {
  const int64_t blocks = K / 32;
  const __m512i low4 = _mm512_set1_epi8(15), eights = _mm512_set1_epi8(8);
  const __m512i high_lanes = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
  __m512 acc[M][N];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 2 <= blocks; i += 2) {
    if constexpr (N == 1 && M == 1) prefetch_ahead<36>(w + 18 * i);  // the row streaming from memory
    __m512i q[N];
    __m512 dw[N];
    for (int r = 0; r < N; ++r) {
      const uint8_t* a = w + r * stride + 18 * i;
      const __m512i raw = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(load16(a + 2))),
                                             _mm256_broadcastsi128_si256(load16(a + 20)), 1);
      q[r] = _mm512_and_si512(_mm512_srlv_epi64(raw, high_lanes), low4);
      dw[r] = scales_of_two(a, 18);
    }
    for (int m = 0; m < M; ++m) {
      const uint8_t* b = x + m * x_stride + 34 * i;
      const __m512i xq = load_two(b + 2, 34);
      const __m512 dx = scales_of_two(b, 34);
      const __m512i minus_8x = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, xq));
      for (int r = 0; r < N; ++r) {
        const __m512i p = _mm512_dpbusd_epi32(minus_8x, q[r], xq);
        acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(p), acc[m][r]);
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < N; ++r) {
      float& o = out[m * ldo + r];
      o = _mm512_reduce_add_ps(acc[m][r]);
      if (i < blocks) {  // an odd last block
        const uint8_t *a = w + r * stride + 18 * i, *b = x + m * x_stride + 34 * i;
        const __m128i raw = load16(a + 2);
        const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
        const __m256i xq = load32(b + 2);
        const __m256i x8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), xq);
        const __m256i p = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, xq), x8);
        o += hsum(_mm256_mul_ps(_mm256_set1_ps(scale_at(a) * scale_at(b)), _mm256_cvtepi32_ps(p)));
      }
    }
}

// The kernels of dot_rows (N weight rows, one row of x): tiles of M = 1.
struct DotQ8_0 {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    q8_0_tile<N, 1>(w, stride, x, 0, K, out, 0);
  }
};
struct DotQ4_0 {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    q4_0_tile<N, 1>(w, stride, x, 0, K, out, 0);
  }
};

// vpshufb's mask that copies int16 element e[l] of each 128-bit lane l to
// all of that lane: a sub-block's scale beside its products.
__m512i pick16(int e0, int e1, int e2, int e3) {
  auto m = [](int e) { return _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * e)); };
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(m(e1), m(e0))), _mm256_set_m128i(m(e3), m(e2)), 1);
}

// Two 256-bit halves as one vector.
__m512i halves(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// The K-quant dots' constants, made once: GCC builds the vectors above
// afresh on every call, some fifty instructions, and these dots are
// called once per weight row.
struct KConstants {
  __m512i pick_q4[4];      // chunk c: sub-blocks 2c, 2c + 1 of Q4_K and Q5_K
  __m512i fifth_bit[4];    // chunk c: bit 2c, then bit 2c + 1 (Q5_K's qh)
  __m512i pick_q6[2];      // a Q6_K half's sub-blocks 0-3, 4-7
  __m512i q6_mask[2];      // quarters (0, 1): bits 0-1, 2-3 of qh; (2, 3): 4-5, 6-7
  __m512i q6_up, q6_down;  // shifts of those bits to bits 4-5
};
const KConstants& k_constants() {
  static const KConstants k = [] {
    KConstants c;
    for (int i = 0; i < 4; ++i) {
      c.pick_q4[i] = pick16(2 * i, 2 * i, 2 * i + 1, 2 * i + 1);
      c.fifth_bit[i] = halves(_mm256_set1_epi8(static_cast<char>(1 << 2 * i)), _mm256_set1_epi8(static_cast<char>(1 << (2 * i + 1))));
    }
    c.pick_q6[0] = pick16(0, 1, 2, 3);
    c.pick_q6[1] = pick16(4, 5, 6, 7);
    c.q6_mask[0] = halves(_mm256_set1_epi8(0x03), _mm256_set1_epi8(0x0c));
    c.q6_mask[1] = halves(_mm256_set1_epi8(0x30), _mm256_set1_epi8(static_cast<char>(0xc0)));
    c.q6_up = halves(_mm256_set1_epi16(4), _mm256_set1_epi16(2));
    c.q6_down = halves(_mm256_setzero_si256(), _mm256_set1_epi16(2));
    return c;
  }();
  return k;
}

// Q4_K and Q5_K · Q8_K, N weight rows against M rows of x: chunk c of 32
// bytes holds sub-block 2c in its low nibbles and 2c + 1 in its high ones,
// so one step puts the chunk in both halves, the high half shifted, and
// meets x's 64 bytes as they lie. Q5_K's fifth bit of sub-block j is bit j
// of each of its 32 bytes of qh. The mins' part, Σ_j m_j (bsums[2j] +
// bsums[2j + 1]), is AVX2's. A decode step's row is N = M = 1; a prompt's
// rows take 4 by 4, each weight row unpacked once for the four rows of x,
// and each pair's float operations those of N = M = 1 (its integer sums are
// exact in any order), so its bits are the same.
template <bool kFifthBit, int N, int M>
void q45_k_tile(const uint8_t* w, uint64_t stride, const uint8_t* x, uint64_t x_stride, int64_t K, float* out,
                int64_t ldo) {
  constexpr int kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const __m512i low4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
  const __m512i high_half = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const KConstants& k = k_constants();
  __m512 acc[M][N];
  __m128 macc[M][N];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < N; ++r) acc[i][r] = _mm512_setzero_ps(), macc[i][r] = _mm_setzero_ps();
  for (int64_t b = 0; b < K / 256; ++b) {
    const uint8_t* a[N];
    __m256i sc_m[N];
    for (int r = 0; r < N; ++r) {
      a[r] = w + r * stride + b * kBytes;
      prefetch_ahead<kBytes>(a[r]);
      sc_m[r] = scales_mins16(a[r]);
    }
    const BlockQ8K* y[M];
    for (int i = 0; i < M; ++i) y[i] = reinterpret_cast<const BlockQ8K*>(x + i * x_stride) + b;
    // Two chains of vpdpwssd, even chunks and odd, added at the end: one
    // chain of four made each row's block wait on their latency (decode
    // 1.2x slower, AMD EPYC Zen 4). The integer sums are the same.
    __m512i isum[2][M][N];
    for (auto& chain : isum)
      for (auto& row : chain)
        for (__m512i& v : row) v = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      __m512i q[N], scale[N];
      for (int r = 0; r < N; ++r) {
        const __m512i raw = _mm512_broadcast_i64x4(load32(a[r] + kQs + 32 * c));
        q[r] = _mm512_and_si512(_mm512_srlv_epi64(raw, high_half), low4);  // sub-blocks 2c, 2c + 1
        if constexpr (kFifthBit) {
          const __m512i qh = _mm512_broadcast_i64x4(load32(a[r] + 16));
          q[r] = _mm512_mask_add_epi8(q[r], _mm512_test_epi8_mask(qh, k.fifth_bit[c]), q[r], sixteen);
        }
        scale[r] = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm256_castsi256_si128(sc_m[r])), k.pick_q4[c]);
      }
      for (int i = 0; i < M; ++i) {
        const __m512i xq = load64(y[i]->qs + 64 * c);
        for (int r = 0; r < N; ++r)
          isum[c & 1][i][r] = _mm512_dpwssd_epi32(isum[c & 1][i][r], _mm512_maddubs_epi16(q[r], xq), scale[r]);
      }
    }
    for (int i = 0; i < M; ++i) {
      const __m128i pairs = sums32(y[i]);
      for (int r = 0; r < N; ++r) {
        const __m128i msum = _mm_madd_epi16(_mm256_extracti128_si256(sc_m[r], 1), pairs);
        // d · y's d and dmin · y's d, converted and multiplied together.
        uint32_t d_dmin;
        std::memcpy(&d_dmin, a[r], sizeof d_dmin);
        const __m128 dd = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d_dmin))), _mm_set1_ps(y[i]->d));
        const __m512i sum = _mm512_add_epi32(isum[0][i][r], isum[1][i][r]);
        acc[i][r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sum), acc[i][r]);
        macc[i][r] = _mm_fmadd_ps(_mm_permute_ps(dd, 0x55), _mm_cvtepi32_ps(msum), macc[i][r]);
      }
    }
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < N; ++r) out[i * ldo + r] = _mm512_reduce_add_ps(acc[i][r]) - hsum(macc[i][r]);
}

// Q6_K · Q8_K, N weight rows against M rows of x: half h's 64 bytes of ql
// hold quarters 0 and 1 in their low nibbles and 2 and 3 in their high
// ones, so one load meets x's 64 bytes of two quarters as they lie; quarter
// k's top two bits are bits 2k, 2k + 1 of the half's 32 bytes of qh. Each
// 128-bit lane is one sub-block of 16, scaled in vpdpwssd by its own scale
// (vpshufb picks four from the half's eight). The offset of 32 is one
// integer sum over bsums, where the lanes start. Tiles as Q4_K's.
template <int N, int M>
void q6_k_tile(const uint8_t* w, uint64_t stride, const uint8_t* x, uint64_t x_stride, int64_t K, float* out,
               int64_t ldo) {
  const __m512i low4 = _mm512_set1_epi8(15);
  const KConstants& k = k_constants();
  __m512 acc[M][N];
  for (auto& row : acc)
    for (__m512& v : row) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / 256; ++b) {
    const uint8_t* a[N];
    __m256i sc16[N];
    for (int r = 0; r < N; ++r) {
      a[r] = w + r * stride + b * 210;
      prefetch_ahead<210>(a[r]);
      sc16[r] = _mm256_cvtepi8_epi16(load16(a[r] + 192));
    }
    const BlockQ8K* y[M];
    __m512i isum[M][N];
    for (int i = 0; i < M; ++i) {
      y[i] = reinterpret_cast<const BlockQ8K*>(x + i * x_stride) + b;
      const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i]->bsums));
      // -32 Σ_s scales[s] bsums[s], in eight int32 lanes, where the sums start.
      for (int r = 0; r < N; ++r)
        isum[i][r] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16[r], bsums), 5)));
    }
    for (int h = 0; h < 2; ++h)
      for (int pair = 0; pair < 2; ++pair) {  // quarters (0, 1), then (2, 3)
        __m512i q[N], scale[N];
        for (int r = 0; r < N; ++r) {
          const __m512i ql = load64(a[r] + 64 * h), qh = _mm512_broadcast_i64x4(load32(a[r] + 128 + 32 * h));
          q[r] = pair == 0 ? _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_sllv_epi16(_mm512_and_si512(qh, k.q6_mask[0]), k.q6_up))
                           : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                             _mm512_srlv_epi16(_mm512_and_si512(qh, k.q6_mask[1]), k.q6_down));
          // The half's eight scales in every 128-bit lane, four picked.
          const __m512i scales = _mm512_broadcast_i32x4(h == 0 ? _mm256_castsi256_si128(sc16[r]) : _mm256_extracti128_si256(sc16[r], 1));
          scale[r] = _mm512_shuffle_epi8(scales, k.pick_q6[pair]);
        }
        for (int i = 0; i < M; ++i) {
          const __m512i xq = load64(y[i]->qs + 128 * h + 64 * pair);
          for (int r = 0; r < N; ++r) isum[i][r] = _mm512_dpwssd_epi32(isum[i][r], _mm512_maddubs_epi16(q[r], xq), scale[r]);
        }
      }
    for (int i = 0; i < M; ++i)
      for (int r = 0; r < N; ++r)
        acc[i][r] = _mm512_fmadd_ps(_mm512_set1_ps(scale_at(a[r] + 208) * y[i]->d), _mm512_cvtepi32_ps(isum[i][r]), acc[i][r]);
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < N; ++r) out[i * ldo + r] = _mm512_reduce_add_ps(acc[i][r]);
}

// The K-quants' dot_rows kernels: tiles of M = 1.
template <bool kFifthBit>
struct DotQ45K {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    q45_k_tile<kFifthBit, N, 1>(w, stride, x, 0, K, out, 0);
  }
};
struct DotQ6K {
  template <int N>
  static void run(const uint8_t* w, uint64_t stride, const uint8_t* x, int64_t K, float* out) {
    q6_k_tile<N, 1>(w, stride, x, 0, K, out, 0);
  }
};

}  // namespace

// Null: the avx2 path's (linalg/quant_dot_scalar.cpp fills them in), but
// for the tiles, which only this path has.
const DotKernels dot_avx512vnni = {dot_rows<DotQ8_0>,
                                   dot_rows<DotQ4_0>,
                                   nullptr,
                                   nullptr,
                                   dot_rows<DotQ45K<false>>,
                                   dot_rows<DotQ45K<true>>,
                                   dot_rows<DotQ6K>,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   nullptr,
                                   q8_0_tile<kDotRows, kTileRowsX>,
                                   q4_0_tile<kDotRows, kTileRowsX>,
                                   q45_k_tile<false, kDotRows, kTileRowsX>,
                                   q45_k_tile<true, kDotRows, kTileRowsX>,
                                   q6_k_tile<kDotRows, kTileRowsX>,
                                   &panel_q8_0_avx512vnni,
                                   &panel_q4_0_avx512vnni,
                                   &panel_q4_k_avx512vnni,
                                   &panel_q5_k_avx512vnni,
                                   &panel_q6_k_avx512vnni,
                                   nullptr,
                                   nullptr};

}  // namespace qkv::linalg
