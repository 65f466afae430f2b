// flash_amx.cpp: AMX-BF16 tile kernels of the bf16 prefill (contract in
// flash_amx.h). Compiled with -mamx-tile -mamx-bf16 and the AVX-512 flags
// (CMakeLists.txt); only ever called after qkv::active_isa() said the CPU
// has AMX and Linux granted this process the tile state.
#include "core/kernels/flash_amx.h"

#include <immintrin.h>

#include <cstring>

#include "core/kernels/flash_bf16.h"
#include "core/simd/amx_tiles.h"

namespace qkv::kernels {
namespace {

using amx::Operand;
using amx::tile_grid;

// Vt[e][j] = V[j][e] for 32 keys j and 16 values e. Each key pair (2t, 2t+1)
// at value e is one 32-bit word, so the 16 x 32 block of bf16 is a 16 x 16
// block of words: interleave each pair of V rows into words (row t of the
// word block, one per value), then transpose the words in four butterfly
// stages (swap the off-diagonal 8 x 8 blocks, then the 4 x 4 blocks inside
// each, and so on: [[A, B], [C, D]]ᵀ = [[Aᵀ, Cᵀ], [Bᵀ, Dᵀ]]).
inline void turn_block(uint16_t* Vt, int64_t ldt, const uint16_t* V, int64_t ldv) {
  alignas(64) int16_t pair_of[32];
  for (int w = 0; w < 32; ++w) pair_of[w] = static_cast<int16_t>(w % 2 ? 16 + w / 2 : w / 2);
  const __m512i interleave = _mm512_load_si512(pair_of);
  __m512i r[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(V + 2 * t * ldv));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(V + (2 * t + 1) * ldv));
    r[t] = _mm512_permutexvar_epi16(interleave,
                                    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
  }
#pragma GCC unroll 4
  for (int b = 8; b >= 1; b /= 2) {
    // Rows i and i + b (bit b of i clear) trade their b-blocks: the low row
    // keeps a's even blocks and takes b's, the high row the odd ones.
    alignas(64) int32_t lo_of[16], hi_of[16];
    for (int k = 0; k < 16; ++k) {
      lo_of[k] = k & b ? 16 + k - b : k;
      hi_of[k] = k & b ? 16 + k : k + b;
    }
    const __m512i lo_idx = _mm512_load_si512(lo_of), hi_idx = _mm512_load_si512(hi_of);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      if (!(i & b)) {
        const __m512i x = r[i], y = r[i + b];
        r[i] = _mm512_permutex2var_epi32(x, lo_idx, y);
        r[i + b] = _mm512_permutex2var_epi32(x, hi_idx, y);
      }
  }
#pragma GCC unroll 16
  for (int e = 0; e < 16; ++e) _mm512_storeu_si512(Vt + e * ldt, r[e]);
}

}  // namespace

void amx_tiles_on() { amx::tiles_on(); }
void amx_tiles_off() { amx::tiles_off(); }

void qk_bf16_amx(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint32_t* Qt2,
                 int64_t D, int ncols, float scale, uint16_t* kpad) {
  const int64_t groups = (nj + 15) / 16, whole = nj / 16;
  if (whole < groups) {  // the last rows, then zero rows up to 16
    const int64_t rows = nj - 16 * whole;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(kpad + r * D, K + (16 * whole + r) * ldk, static_cast<size_t>(D) * 2);
    std::memset(kpad + rows * D, 0, static_cast<size_t>((16 - rows) * D) * 2);
  }
  const int64_t qgroups = (ncols + 15) / 16;
  auto k_rows = [&](int64_t g, int64_t step) {
    return g < whole ? Operand{K + g * 16 * ldk + 32 * step, ldk * 2}
                     : Operand{kpad + 32 * step, D * 2};
  };
  auto q_pairs = [&](int64_t g, int64_t step) {
    return Operand{Qt2 + 16 * step * kBR + 16 * g, kBR * 4};
  };
  tile_grid(St, kBR, false, groups, qgroups, D / 32, k_rows, q_pairs);
  // The scale after the float32 sums, as qk_bf16_avx512 applies it.
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < nj; ++j)
    for (int64_t g = 0; g < qgroups; ++g) {
      float* x = St + j * kBR + 16 * g;
      _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), s));
    }
}

void pack_vt_bf16(uint16_t* Vt, int64_t ldt, const uint16_t* V, int64_t ldv, int64_t nj,
                  int64_t Dv) {
  const int64_t whole = nj / 32 * 32, ewhole = Dv / 16 * 16;
  for (int64_t j0 = 0; j0 < whole; j0 += 32)
    for (int64_t e0 = 0; e0 < ewhole; e0 += 16) turn_block(Vt + e0 * ldt + j0, ldt, V + j0 * ldv + e0, ldv);
  // The edges element by element: keys past the last 32, values past the last 16.
  for (int64_t e = 0; e < Dv; ++e)
    for (int64_t j = e < ewhole ? whole : 0; j < nj; ++j) Vt[e * ldt + j] = V[j * ldv + e];
}

void pv_bf16_amx(float* Ot, uint32_t* P2, int64_t nj, int ncols, const uint16_t* Vt, int64_t ldt,
                 int64_t Dv, const float* alpha, uint16_t* vpad) {
  const int64_t qgroups = (ncols + 15) / 16;
  const int64_t chunks = (nj + 31) / 32, whole = nj / 32;
  // Zero weights for the pairs past the tile, up to the last chunk's 16 rows.
  for (int64_t t = bf16_pairs(nj); t < 16 * chunks; ++t)
    std::memset(P2 + t * kBR, 0, static_cast<size_t>(qgroups * 16) * 4);
  if (whole < chunks) {  // the last keys of every row of Vt, zero past nj
    const int64_t keys = nj - 32 * whole;
    for (int64_t e = 0; e < Dv; ++e) {
      std::memcpy(vpad + e * 32, Vt + e * ldt + 32 * whole, static_cast<size_t>(keys) * 2);
      std::memset(vpad + e * 32 + keys, 0, static_cast<size_t>(32 - keys) * 2);
    }
  }
  for (int64_t g = 0; g < qgroups; ++g) {
    const __m512 a = _mm512_loadu_ps(alpha + 16 * g);
    for (int64_t e = 0; e < Dv; ++e) {
      float* x = Ot + e * kBR + 16 * g;
      _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), a));
    }
  }
  auto v_rows = [&](int64_t g, int64_t chunk) {
    return chunk < whole ? Operand{Vt + g * 16 * ldt + 32 * chunk, ldt * 2}
                         : Operand{vpad + g * 16 * 32, 64};
  };
  auto p_pairs = [&](int64_t g, int64_t chunk) {
    return Operand{P2 + 16 * chunk * kBR + 16 * g, kBR * 4};
  };
  tile_grid(Ot, kBR, true, Dv / 16, qgroups, chunks, v_rows, p_pairs);
}

}  // namespace qkv::kernels
