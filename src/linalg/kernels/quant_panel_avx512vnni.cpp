// The panels of linalg/quant_panel.h on AVX512-VNNI (compiled with the
// flags of quant_dot_avx512vnni.cpp; run from the avx512 path up on a CPU
// that has AVX512-VNNI).
//
// Packing gathers one dword of each of the panel's 16 rows (four weights,
// or eight nibbles) and leaves them side by side; a block's scales are
// multiplied out per row. The dots then run, per block and row of x:
//   Q8_0, Q4_0: s = -offset Σ x_b + Σ_g vpdpbusd(w_g, x_4g)  (exact int32)
//               acc += float(s) (d_w d_x)
//   Q4_K, Q5_K: per sub-block j, s_j = Σ_g vpdpbusd(q_g, x_4g);
//               blk += float(s_j) d sc_j - dmin m_j Σ x_j; acc += blk d_x
//   Q6_K:       per sub-block of 16, s_j = -32 Σ x_j + Σ_g vpdpbusd(q_g, x_4g);
//               blk += float(s_j) d sc_j; acc += blk d_x
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "linalg/kernels/quant_dot_x86.h"
#include "linalg/quant_panel.h"

namespace qkv::linalg {
namespace {

constexpr int kGroupBytes = 64;  // four weights of each of 16 rows

// Where each of the panel's 16 lanes reads: weight row r's byte offset,
// r * stride as int64 (no bound on a row's size), and which rows exist.
struct Lanes {
  __m512i lo, hi;
  __mmask8 lo_mask, hi_mask;
};
Lanes lanes_of(uint64_t stride, int n) {
  long long at[16];
  for (int r = 0; r < 16; ++r) at[r] = static_cast<long long>(r * stride);
  const unsigned live = n >= 16 ? 0xffffu : (1u << n) - 1;
  return {_mm512_loadu_si512(at), _mm512_loadu_si512(at + 8), static_cast<__mmask8>(live), static_cast<__mmask8>(live >> 8)};
}

// The dword at base + r * stride of each live row r, zero in the others.
__m512i gather(const uint8_t* base, const Lanes& c) {
  const __m256i lo = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), c.lo_mask, c.lo, base, 1);
  const __m256i hi = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), c.hi_mask, c.hi, base, 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The f16 at base of each live row, as float32.
__m512 gather_f16(const uint8_t* base, const Lanes& c) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gather(base, c)));
}

void store(uint8_t* p, __m512i v) { _mm512_storeu_si512(p, v); }
void store(uint8_t* p, __m512 v) { _mm512_storeu_ps(reinterpret_cast<float*>(p), v); }
__m512i load_group(const uint8_t* p) { return _mm512_loadu_si512(p); }
__m512 load_floats(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }

// Four int8s of x in every lane.
__m512i x4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

__m512i bytes_of(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }

// Each row of x's 16 sums, the first n of them, at out + i * ldo.
template <int M>
void store_rows(const __m512 (&acc)[M], float* out, int64_t ldo, int n) {
  const auto live = static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1);
  for (int i = 0; i < M; ++i) _mm512_mask_storeu_ps(out + i * ldo, live, acc[i]);
}

// ---- Q8_0 and Q4_0: blocks of 32 ----

constexpr int64_t kBlock32Bytes = 8 * kGroupBytes + 64;
int64_t panel_bytes_32(int64_t K) { return K / 32 * kBlock32Bytes; }

void pack_q8_0(const uint8_t* w, uint64_t stride, int n, int64_t K, uint8_t* panel) {
  const Lanes c = lanes_of(stride, n);
  const __m512i flip = bytes_of(0x80);  // q + 128: int8 to uint8
  for (int64_t b = 0; b < K / 32; ++b, w += 34, panel += kBlock32Bytes) {
    for (int g = 0; g < 8; ++g) store(panel + kGroupBytes * g, _mm512_xor_si512(gather(w + 2 + 4 * g, c), flip));
    store(panel + 8 * kGroupBytes, gather_f16(w, c));
  }
}

void pack_q4_0(const uint8_t* w, uint64_t stride, int n, int64_t K, uint8_t* panel) {
  const Lanes c = lanes_of(stride, n);
  const __m512i low4 = bytes_of(15);
  for (int64_t b = 0; b < K / 32; ++b, w += 18, panel += kBlock32Bytes) {
    for (int g = 0; g < 4; ++g) {  // bytes 4g .. 4g + 3: weights 4g .. (low), 16 + 4g .. (high)
      const __m512i q = gather(w + 2 + 4 * g, c);
      store(panel + kGroupBytes * g, _mm512_and_si512(q, low4));
      store(panel + kGroupBytes * (g + 4), _mm512_and_si512(_mm512_srli_epi32(q, 4), low4));
    }
    store(panel + 8 * kGroupBytes, gather_f16(w, c));
  }
}

template <int kOffset, int M>
void dot_32(const uint8_t* panel, const PanelX& x, int64_t m, int64_t K, float* out, int64_t ldo, int n) {
  const int64_t blocks = K / 32;
  const uint8_t* xq[M];
  const float* xd[M];
  const int32_t* xs[M];
  __m512 acc[M];
  for (int i = 0; i < M; ++i) {
    xq[i] = x.blocks + (m + i) * x.stride + 2;
    xd[i] = x.scale + (m + i) * blocks;
    xs[i] = x.sums + (m + i) * blocks;
    acc[i] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b, panel += kBlock32Bytes) {
    __m512i s[M];
    for (int i = 0; i < M; ++i) s[i] = _mm512_set1_epi32(-kOffset * xs[i][b]);
    for (int g = 0; g < 8; ++g) {
      const __m512i q = load_group(panel + kGroupBytes * g);
      for (int i = 0; i < M; ++i) s[i] = _mm512_dpbusd_epi32(s[i], q, x4(xq[i] + 34 * b + 4 * g));
    }
    const __m512 dw = load_floats(panel + 8 * kGroupBytes);
    for (int i = 0; i < M; ++i)
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[i][b])), acc[i]);
  }
  store_rows<M>(acc, out, ldo, n);
}

// ---- Q4_K, Q5_K and Q6_K: blocks of 256 ----

constexpr int64_t kBlock256Bytes = 64 * kGroupBytes + 16 * 64;
int64_t panel_bytes_256(int64_t K) { return K / 256 * kBlock256Bytes; }

// A K-quant block's per-row scales: for each live row, fill(row's block, row)
// writes its floats; the rest stay zero.
template <class Fill>
void pack_scales(const uint8_t* w, uint64_t stride, int n, uint8_t* scales, Fill fill) {
  float f[16][16] = {};  // [slot][row]
  for (int r = 0; r < n; ++r) fill(w + r * stride, r, f);
  std::memcpy(scales, f, sizeof f);
}

// Q4_K's and Q5_K's slots: 2j the rows' d sc_j, 2j + 1 their dmin m_j.
template <bool kFifthBit>
void pack_q45_k(const uint8_t* w, uint64_t stride, int n, int64_t K, uint8_t* panel) {
  const Lanes c = lanes_of(stride, n);
  const __m512i low4 = bytes_of(15), bit0 = bytes_of(1);
  constexpr int kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  for (int64_t b = 0; b < K / 256; ++b, w += kBytes, panel += kBlock256Bytes) {
    for (int g = 0; g < 8; ++g) {
      const __m512i qh = kFifthBit ? gather(w + 16 + 4 * g, c) : _mm512_setzero_si512();
      for (int ch = 0; ch < 4; ++ch) {  // chunk ch: sub-block 2 ch in the low nibbles, 2 ch + 1 in the high
        const __m512i q = gather(w + kQs + 32 * ch + 4 * g, c);
        __m512i lo = _mm512_and_si512(q, low4), hi = _mm512_and_si512(_mm512_srli_epi32(q, 4), low4);
        if constexpr (kFifthBit) {  // bit j of qh's byte l: weight l of sub-block j
          lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * ch), bit0), 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * ch + 1), bit0), 4));
        }
        store(panel + kGroupBytes * (8 * (2 * ch) + g), lo);
        store(panel + kGroupBytes * (8 * (2 * ch + 1) + g), hi);
      }
    }
    pack_scales(w, stride, n, panel + 64 * kGroupBytes, [](const uint8_t* a, int r, float (*f)[16]) {
      const float d = scale_at(a), dmin = scale_at(a + 2);
      const Scales8 s = unpack_scales(a + 4);
      for (int j = 0; j < 8; ++j) {
        f[2 * j][r] = d * static_cast<float>(s.sc[j / 4] >> 8 * (j % 4) & 0xff);
        f[2 * j + 1][r] = dmin * static_cast<float>(s.m[j / 4] >> 8 * (j % 4) & 0xff);
      }
    });
  }
}

void pack_q6_k(const uint8_t* w, uint64_t stride, int n, int64_t K, uint8_t* panel) {
  const Lanes c = lanes_of(stride, n);
  const __m512i low4 = bytes_of(15), low2 = bytes_of(3);
  for (int64_t b = 0; b < K / 256; ++b, w += 210, panel += kBlock256Bytes) {
    // Weight v = 128 h + 32 k + l: ql[64 h + 32 (k % 2) + l]'s low (k < 2)
    // or high nibble, and bits 2k, 2k + 1 of qh[32 h + l] above them.
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; l += 4) {
        const __m512i ql0 = gather(w + 64 * h + l, c), ql1 = gather(w + 64 * h + 32 + l, c);
        const __m512i qh = gather(w + 128 + 32 * h + l, c);
        for (int k = 0; k < 4; ++k) {
          const __m512i ql = k % 2 ? ql1 : ql0;
          const __m512i low = _mm512_and_si512(k < 2 ? ql : _mm512_srli_epi32(ql, 4), low4);
          const __m512i high = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * k), low2), 4);
          store(panel + kGroupBytes * ((128 * h + 32 * k + l) / 4), _mm512_or_si512(low, high));
        }
      }
    pack_scales(w, stride, n, panel + 64 * kGroupBytes, [](const uint8_t* a, int r, float (*f)[16]) {
      const float d = scale_at(a + 208);
      for (int j = 0; j < 16; ++j) f[j][r] = d * static_cast<float>(static_cast<int8_t>(a[192 + j]));
    });
  }
}

const BlockQ8K* q8_k_row(const PanelX& x, int64_t m) { return reinterpret_cast<const BlockQ8K*>(x.blocks + m * x.stride); }

template <int M>
void dot_q45_k(const uint8_t* panel, const PanelX& x, int64_t m, int64_t K, float* out, int64_t ldo, int n) {
  const int64_t blocks = K / 256;
  const BlockQ8K* y[M];
  const float* xs[M];
  __m512 acc[M];
  for (int i = 0; i < M; ++i) {
    y[i] = q8_k_row(x, m + i);
    xs[i] = x.sums32 + (m + i) * (K / 32);
    acc[i] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b, panel += kBlock256Bytes) {
    __m512 blk[M];
    for (int i = 0; i < M; ++i) blk[i] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      __m512i s[M];
      for (int i = 0; i < M; ++i) s[i] = _mm512_setzero_si512();
      for (int g = 0; g < 8; ++g) {
        const __m512i q = load_group(panel + kGroupBytes * (8 * j + g));
        for (int i = 0; i < M; ++i) s[i] = _mm512_dpbusd_epi32(s[i], q, x4(y[i][b].qs + 32 * j + 4 * g));
      }
      const __m512 sc = load_floats(panel + 64 * kGroupBytes + 128 * j), mn = load_floats(panel + 64 * kGroupBytes + 128 * j + 64);
      for (int i = 0; i < M; ++i) {
        blk[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), sc, blk[i]);
        blk[i] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(xs[i][8 * b + j]), blk[i]);
      }
    }
    for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(blk[i], _mm512_set1_ps(y[i][b].d), acc[i]);
  }
  store_rows<M>(acc, out, ldo, n);
}

template <int M>
void dot_q6_k(const uint8_t* panel, const PanelX& x, int64_t m, int64_t K, float* out, int64_t ldo, int n) {
  const int64_t blocks = K / 256;
  const BlockQ8K* y[M];
  const int32_t* xs[M];
  __m512 acc[M];
  for (int i = 0; i < M; ++i) {
    y[i] = q8_k_row(x, m + i);
    xs[i] = x.sums + (m + i) * (K / 16);
    acc[i] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b, panel += kBlock256Bytes) {
    __m512 blk[M];
    for (int i = 0; i < M; ++i) blk[i] = _mm512_setzero_ps();
    for (int j = 0; j < 16; ++j) {
      __m512i s[M];
      for (int i = 0; i < M; ++i) s[i] = _mm512_set1_epi32(-32 * xs[i][16 * b + j]);
      for (int g = 0; g < 4; ++g) {
        const __m512i q = load_group(panel + kGroupBytes * (4 * j + g));
        for (int i = 0; i < M; ++i) s[i] = _mm512_dpbusd_epi32(s[i], q, x4(y[i][b].qs + 16 * j + 4 * g));
      }
      const __m512 sc = load_floats(panel + 64 * kGroupBytes + 64 * j);
      for (int i = 0; i < M; ++i) blk[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), sc, blk[i]);
    }
    for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(blk[i], _mm512_set1_ps(y[i][b].d), acc[i]);
  }
  store_rows<M>(acc, out, ldo, n);
}

// A dot of any 1..kPanelRowsX rows from a kernel templated on them.
using PanelDot = void (*)(const uint8_t*, const PanelX&, int64_t, int64_t, float*, int64_t, int);
template <template <int> class Kernel, int... Ms>
constexpr std::array<PanelDot, sizeof...(Ms)> by_rows(std::integer_sequence<int, Ms...>) {
  return {Kernel<Ms + 1>::run...};
}
template <template <int> class Kernel>
void dot_any(const uint8_t* panel, const PanelX& x, int64_t m, int rows, int64_t K, float* out, int64_t ldo, int n) {
  static constexpr auto kernel = by_rows<Kernel>(std::make_integer_sequence<int, kPanelRowsX>{});
  kernel[rows - 1](panel, x, m, K, out, ldo, n);
}
template <int M> struct Q8_0 { static constexpr auto run = dot_32<128, M>; };
template <int M> struct Q4_0 { static constexpr auto run = dot_32<8, M>; };
template <int M> struct Q45K { static constexpr auto run = dot_q45_k<M>; };
template <int M> struct Q6K { static constexpr auto run = dot_q6_k<M>; };

}  // namespace

extern const PanelKernels panel_q8_0_avx512vnni = {panel_bytes_32, pack_q8_0, dot_any<Q8_0>};
extern const PanelKernels panel_q4_0_avx512vnni = {panel_bytes_32, pack_q4_0, dot_any<Q4_0>};
extern const PanelKernels panel_q4_k_avx512vnni = {panel_bytes_256, pack_q45_k<false>, dot_any<Q45K>};
extern const PanelKernels panel_q5_k_avx512vnni = {panel_bytes_256, pack_q45_k<true>, dot_any<Q45K>};
extern const PanelKernels panel_q6_k_avx512vnni = {panel_bytes_256, pack_q6_k, dot_any<Q6K>};

}  // namespace qkv::linalg
