// amx_tiles.h: the tile machinery the AMX kernels share (the attention's core/kernels/
// amx/flash_amx.cpp, the GEMM's core/kernels/amx/gemm_bf16_amx.cpp). Inline code with
// AMX instructions: include it only from files compiled with -mamx-tile
// -mamx-bf16, whose functions run only after qkv::active_isa() chose
// Isa::amx.
//
// Tile registers: C(a, b) = tmm(2a + b) for a 2 x 2 block of results,
// A(a) = tmm(4 + a), B(b) = tmm(6 + b). Every tile is configured as 16 rows
// of 64 bytes: 16 x 16 float32 results, 16 x 32 bf16 of A, 16 pair rows of B
// (row t holds, per column n, the pair (b[2t][n], b[2t+1][n])).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qkv::kernels::amx {

// The 64-byte operand of ldtilecfg (palette 1). A constant in read-only
// memory: GCC 12's _tile_loadconfig tells the compiler it reads only the
// first 8 bytes, so a configuration built on the stack could lose the stores
// to its rows and column widths.
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];  // bytes per row of tile t
  uint8_t rows[16];    // rows of tile t
};
static_assert(sizeof(TileConfig) == 64);

inline constexpr TileConfig kConfig = {
    1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

// GCC 12's tile loads are asm statements without a memory operand: without
// this barrier the compiler may move a store to the buffer a tile then reads
// (kpad, vpad, P2's zero rows, Ot scaled by alpha) past the load.
inline void memory_barrier() { asm volatile("" ::: "memory"); }

// A tile's source: its first row, and the bytes between rows.
struct Operand {
  const void* p;
  int64_t stride;
};

// C(a, b) = (accumulate ? C(a, b) : 0) + sum_k A(a, k) · B(b, k) for a < NA,
// b < NB, k < steps: the 16 x 16 result tiles at C + a*16*ldc + b*16 (ldc in
// floats), operands from a_of(a, k) and b_of(b, k).
template <int NA, int NB, class AOf, class BOf>
inline void tile_block(float* C, int64_t ldc, bool accumulate, int64_t steps, AOf a_of, BOf b_of) {
  const int64_t cs = ldc * static_cast<int64_t>(sizeof(float));
  float* c10 = C + 16 * ldc;
  memory_barrier();
  if (accumulate) {
    _tile_loadd(0, C, cs);
    if constexpr (NB == 2) _tile_loadd(1, C + 16, cs);
    if constexpr (NA == 2) _tile_loadd(2, c10, cs);
    if constexpr (NA == 2 && NB == 2) _tile_loadd(3, c10 + 16, cs);
  } else {
    _tile_zero(0);
    if constexpr (NB == 2) _tile_zero(1);
    if constexpr (NA == 2) _tile_zero(2);
    if constexpr (NA == 2 && NB == 2) _tile_zero(3);
  }
  for (int64_t k = 0; k < steps; ++k) {
    const Operand a0 = a_of(0, k), b0 = b_of(0, k);
    _tile_loadd(4, a0.p, a0.stride);
    _tile_loadd(6, b0.p, b0.stride);
    if constexpr (NA == 2) {
      const Operand a1 = a_of(1, k);
      _tile_loadd(5, a1.p, a1.stride);
    }
    if constexpr (NB == 2) {
      const Operand b1 = b_of(1, k);
      _tile_loadd(7, b1.p, b1.stride);
    }
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NA == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NA == 2 && NB == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, cs);
  if constexpr (NB == 2) _tile_stored(1, C + 16, cs);
  if constexpr (NA == 2) _tile_stored(2, c10, cs);
  if constexpr (NA == 2 && NB == 2) _tile_stored(3, c10 + 16, cs);
}

// The whole product over ga_n groups of 16 rows (A) and gb_n groups of 16
// columns (B), in 2 x 2 blocks of result tiles (a last odd group alone).
template <class AOf, class BOf>
void tile_grid(float* C, int64_t ldc, bool accumulate, int64_t ga_n, int64_t gb_n, int64_t steps,
               AOf a_of, BOf b_of) {
  for (int64_t ga = 0; ga < ga_n; ga += 2)
    for (int64_t gb = 0; gb < gb_n; gb += 2) {
      float* c = C + ga * 16 * ldc + gb * 16;
      auto a = [&](int x, int64_t k) { return a_of(ga + x, k); };
      auto b = [&](int x, int64_t k) { return b_of(gb + x, k); };
      const bool two_a = ga + 1 < ga_n, two_b = gb + 1 < gb_n;
      if (two_a && two_b)
        tile_block<2, 2>(c, ldc, accumulate, steps, a, b);
      else if (two_a)
        tile_block<2, 1>(c, ldc, accumulate, steps, a, b);
      else if (two_b)
        tile_block<1, 2>(c, ldc, accumulate, steps, a, b);
      else
        tile_block<1, 1>(c, ldc, accumulate, steps, a, b);
    }
}

// Loads the one tile configuration on the calling thread; tiles_off
// releases the tile state (the OS then need not save it on a switch).
inline void tiles_on() { _tile_loadconfig(&kConfig); }
inline void tiles_off() { _tile_release(); }

}  // namespace qkv::kernels::amx
