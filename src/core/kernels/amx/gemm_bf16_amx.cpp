// gemm_bf16_amx.cpp: gemm_bf16's block of C on AMX tiles (contract in
// core/gemm_bf16_kernels.h). Compiled with -mamx-tile -mamx-bf16 and the
// AVX-512 flags; called only through the amx path's table.
#include <immintrin.h>

#include "core/gemm_bf16_kernels.h"
#include "core/kernels/avx512bf16/gemm_bf16_store.h"
#include "core/simd/amx_tiles.h"

namespace qkv::kernels::bf16gemm {
namespace {

void amx_begin() { amx::tiles_on(); }
void amx_end() { amx::tiles_off(); }

void amx_block(const uint32_t* a, int64_t a_ld, const uint32_t* b, int64_t b_ld, int64_t np16,
               int rows, int cols, float alpha, float beta, const float* bias, float* c,
               int64_t ldc) {
  // The block's sums, stored by the tiles and combined with C below: a tile
  // store has no alpha, beta or mask.
  alignas(64) float acc[32 * 32];
  auto a_of = [&](int g, int64_t k) { return amx::Operand{a + g * 16 * a_ld + 16 * k, a_ld * 4}; };
  auto b_of = [&](int g, int64_t k) { return amx::Operand{b + 16 * k * b_ld + 16 * g, b_ld * 4}; };
  if (rows > 16)
    amx::tile_block<2, 2>(acc, 32, false, np16 / 16, a_of, b_of);
  else
    amx::tile_block<1, 2>(acc, 32, false, np16 / 16, a_of, b_of);
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int v = 0; v < 2 && 16 * v < cols; ++v) {
    const __mmask16 m = first_lanes(cols - 16 * v);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
    for (int r = 0; r < rows; ++r)
      store_c(c + r * ldc + 16 * v, m, _mm512_load_ps(acc + r * 32 + 16 * v), va, vb, beta != 0.0f,
              bias != nullptr, bv);
  }
}

}  // namespace

constinit const AmxGemmKernels amx_gemm{amx_begin, amx_end, amx_block};

}  // namespace qkv::kernels::bf16gemm
