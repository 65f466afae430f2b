// flash_amx.h: the AMX-BF16 tile kernels of the bf16 prefill
// (amx/flash_amx.cpp), called only when active_isa() is Isa::amx, through
// the table FlashAmxKernels at the end (the amx path's IsaKernels points at
// it), and only between amx_tiles_on() and amx_tiles_off() on the calling
// thread.
//
// One AMX instruction multiplies tiles: C [16][16] float32 += A [16][32 bf16]
// · B [16][16 pairs], where row t of B holds, for each column n, the pair
// (b[2t][n], b[2t+1][n]): the pair words vdpbf16ps reads too. The transposed
// score layout of the vector kernels (flash_kernels.h) feeds both products
// without a per-tile transpose:
//   Q·Kᵀ  St[j][i] = k_j · q_i            C = St, A = K's rows in place,
//                                           B = Qt2 (the queries' pairs along D);
//   P·V   Ot[e][i] = sum_j V[j][e] P[j][i]  C = Oᵀ, A = Vᵀ's rows (each head's V
//                                           transposed once, pack_vt_bf16),
//                                           B = P2 (the softmax's key pairs).
// So the output accumulator is kept transposed, Ot [Dv][kBR], and read
// transposed once when a block is finished.
#pragma once

#include <cstdint>

#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

// A Q·Kᵀ tile reads 32 elements of D at a time (K read in place: no padding
// past D), a P·V tile 16 rows of Dv; other head sizes stay on the
// avx512bf16 kernels.
inline bool amx_shape_ok(int64_t D, int64_t Dv) { return D % 32 == 0 && Dv % 16 == 0; }

// Loads the tile configuration (all eight tiles 16 rows of 64 bytes) on the
// calling thread; amx_tiles_off releases the tile state.
void amx_tiles_on();
void amx_tiles_off();

// St[j][i] = scale * sum_d K[j*ldk + d] * q_i[d] for j < nj and the first
// ncols columns rounded up to 16 (Qt2's padding columns are zero). St [kBC]
// [kBR]; its rows from nj up to the next multiple of 16 are written too.
// K [nj][D] bf16 bits, rows ldk apart, never read past row nj-1: a last
// group of fewer than 16 rows is copied into kpad [16][D] with zero rows.
// Qt2 [D/2][kBR] pair words (as for qk_bf16_avx512). D % 32 == 0.
void qk_bf16_amx(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint32_t* Qt2,
                 int64_t D, int ncols, float scale, uint16_t* kpad);

// Vt[e*ldt + j] = V[j*ldv + e] for j < nj, e < Dv: V [nj][Dv] bf16 bits
// (rows ldv apart) transposed, so that a row of Vt is one value dimension
// over the keys, an A tile of P·V.
void pack_vt_bf16(uint16_t* Vt, int64_t ldt, const uint16_t* V, int64_t ldv, int64_t nj,
                  int64_t Dv);

// Ot[e][i] = alpha[i] * Ot[e][i] + sum_j P[j][i] * V[j][e] for e < Dv and the
// first ncols columns rounded up to 16. Ot [Dv][kBR] float32. P2 [kBC/2][kBR]
// the softmax's pair words (softmax_pairs_bf16_avx512); its rows from
// bf16_pairs(nj) up to the next multiple of 16 are zeroed here. Vt: the tile's
// keys, Vt[e*ldt + j] = V[j][e] for j < nj, never read past key nj-1: a last
// chunk of fewer than 32 keys is copied into vpad [Dv][32] with zeros (a key
// past the visible end may hold NaN, and 0 x NaN is NaN). Dv % 16 == 0.
void pv_bf16_amx(float* Ot, uint32_t* P2, int64_t nj, int ncols, const uint16_t* Vt, int64_t ldt,
                 int64_t Dv, const float* alpha, uint16_t* vpad);

// The functions above as the attention calls them, through the path's table
// (core/isa_kernels.h): each member is the function of the same role.
struct FlashAmxKernels {
  decltype(&amx_tiles_on) tiles_on;
  decltype(&amx_tiles_off) tiles_off;
  decltype(&qk_bf16_amx) qk;
  decltype(&pack_vt_bf16) pack_vt;
  decltype(&pv_bf16_amx) pv;
};

// kernels/amx/isa_table.cpp.
extern const FlashAmxKernels flash_amx;

}  // namespace qkv::kernels
