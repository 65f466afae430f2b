// flash_bf16.h: the AVX512-BF16 micro-kernels of the forward for bfloat16
// inputs, Q·Kᵀ (avx512bf16/flash_avx512bf16.cpp), the prefill's softmax
// into bf16 pairs (avx512bf16/softmax_avx512bf16.cpp) and P·V
// (avx512bf16/pv_avx512bf16.cpp), called only when active_isa() is
// Isa::avx512bf16, through the table FlashBf16Kernels at the end (the
// avx512bf16 and amx paths' IsaKernels point at it).
//
// vdpbf16ps multiplies pairs of bf16 and adds both products to a float32
// lane, so the packed queries hold pairs along D: Qt2[t][i] is the 32-bit
// word (q_i[2t] in the low half, q_i[2t+1] in the high half), and K is read
// in place, each row's pair (k_j[2t], k_j[2t+1]) broadcast as one 32-bit
// word. The products of two bf16 are exact in float32 and the sums are
// float32 (round to nearest); inputs that are bf16 denormals count as 0
// (the instruction's DAZ), a relative change below 2^-126.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

// Pairs of D packed per query: D odd gets a zero high half in its last pair.
inline int64_t bf16_pairs(int64_t D) { return (D + 1) / 2; }

// dst[t][r] = the word (x_r[2t], x_r[2t+1]) (little-endian: x_r[2t] low) of
// bf16 rows x_r = row(r) for r < rows, zero past E and for columns r >= rows
// up to kBR: the packed queries of qk_bf16_avx512 (the forward's Q, the
// backward's Q and dO). Plain code, called outside the AVX512-BF16 files.
template <class Row>
inline void pack_pairs_bf16(uint32_t* dst, int rows, int64_t E, Row row) {
  const int64_t whole = E / 2;
  for (int r = 0; r < kBR; ++r) {
    if (r >= rows) {
      for (int64_t t = 0; t < bf16_pairs(E); ++t) dst[t * kBR + r] = 0;
      continue;
    }
    const uint16_t* x = row(r);
    for (int64_t t = 0; t < whole; ++t) std::memcpy(&dst[t * kBR + r], x + 2 * t, sizeof(uint32_t));
    if (E % 2) dst[whole * kBR + r] = x[E - 1];
  }
}

// St[j][i] = scale * sum_d K[j*ldk + d] * q_i[d] for j < nj and the first
// `ncols` columns (rounded up to 16; Qt2's padding columns are zero).
// St [nj][kBR] float32, K [nj][D] bf16 bits with rows ldk apart (never read
// past element D-1 of a row), Qt2 [bf16_pairs(D)][kBR] pairs. The scale is
// applied in float32 after the sum, so Q is never rounded twice.
void qk_bf16_avx512(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint32_t* Qt2,
                    int64_t D, int ncols, float scale);

// Decode's few rows (the qk_rows form): D rounded up to whole 32-element
// vectors, the row stride of the packed queries.
inline int64_t bf16_row_pad(int64_t D) { return (D + 31) / 32 * 32; }

// St[j][i] = scale * sum_d K[j*ldk + d] * Q[i*bf16_row_pad(D) + d] for j < nj,
// i < ncols <= 4: vectors along D, so no lane idles when ncols is 1. Q [ncols]
// rows of bf16 bits, zero past D; K [nj][D] bf16 in place (masked loads
// never touch past element D-1 of a row).
void qk_rows_bf16_avx512(float* St, const uint16_t* K, int64_t ldk, int64_t nj, const uint16_t* Q,
                         int64_t D, int ncols, float scale);

// O[i][:] = alpha[i] * O[i][:] + sum_t P2[t][i] · (V[2t][:], V[2t+1][:]) for
// i < ncols <= 4: decode's P·V, with the weights in pairs (pack_p_bf16_avx512)
// and V [nj][Dv] bf16 read in place, two rows interleaved in registers
// (decode reads each V row once: packing it first would add a store and a
// load per element). O [ncols][Dv] float32.
void pv_rows_bf16_avx512(float* O, const uint32_t* P2, int64_t nj, int ncols, const uint16_t* V,
                         int64_t ldv, int64_t Dv, const float* alpha);

// ---- P·V on pairs of keys ----
// P2[t][i] = the word (bf16(P[2t][i]) low, bf16(P[2t+1][i]) high) for
// t < bf16_pairs(nj) and the first `ncols` columns (rounded up to 16), round
// to nearest even; the high half is 0 when nj is odd. P [nj][kBR] float32
// (the softmax's output), P2 [bf16_pairs(nj)][kBR].
void pack_p_bf16_avx512(uint32_t* P2, const float* P, int64_t nj, int ncols);

// The online softmax step of FlashKernels::softmax over St [nj][kBR] for
// ncols > kRowsForQkRows (prefill panels), with the weights written as P2
// (the words of pack_p_bf16_avx512) instead of into St, which it only
// reads: bitwise what softmax then pack_p_bf16_avx512 give for such ncols.
void softmax_pairs_bf16_avx512(uint32_t* P2, const float* St, int64_t nj, int ncols, float* m,
                               float* l, float* alpha);

// V2[t][e] = the word (V[2t][e] low, V[2t+1][e] high) for t < bf16_pairs(nj),
// e < Dv; the high half is 0 when nj is odd. V [nj][Dv] bf16 bits with rows
// ldv apart (never read past element Dv-1 of a row), V2 [bf16_pairs(nj)][Dv].
void pack_v_bf16_avx512(uint32_t* V2, const uint16_t* V, int64_t ldv, int64_t nj, int64_t Dv);

// O[i][:] = alpha[i] * O[i][:] + sum_t P2[t][i] · V2[t][:] for i < ncols: the
// two keys of each pair in one vdpbf16ps. O [kBR][Dv] float32.
void pv_bf16_avx512(float* O, const uint32_t* P2, int64_t nj, int ncols, const uint32_t* V2,
                    int64_t Dv, const float* alpha);

// ---- the backward's products (flash_backward_bf16.cpp) ----
// Where A2 holds row r's pair t of bf16 weights: pair_major at
// A2[t*kBR + r] (the words of pack_p_bf16_avx512: pairs of tile rows, i.e.
// keys), row_major at A2[r*(kBR/2) + t] (a [rows][kBR] bf16 tile of
// round_rows_bf16_avx512 read as words: pairs of its columns, i.e. queries).
enum class PairLayout { pair_major, row_major };

// C[r][:] += sum_t A2(t, r) · B2[t][:] for r < nr, t < npairs: each A2 word a
// pair of bf16 weights, each B2 word the matching pair of rows' elements.
// C [nr][ne] float32 (row stride ne), B2 [npairs][ne]. The kernel of
// pv_bf16_avx512 with no rescaling: per element one chain of vdpbf16ps over
// t in order, however rows and columns are blocked.
void mac_pairs_bf16_avx512(float* C, const uint32_t* A2, PairLayout layout, int64_t npairs, int nr,
                           const uint32_t* B2, int64_t ne);

// dst[r*kBR + c] = bf16(src[r*kBR + c]) (round to nearest even) for r < rows
// and c < ncols, and 0 for c in [ncols, ncols rounded up to 16): each row's
// words are then pairs along the columns, (c = 2t low, 2t + 1 high), with
// an odd last column paired with 0.
void round_rows_bf16_avx512(uint16_t* dst, const float* src, int64_t rows, int ncols);

// The functions above as the attention calls them, through the path's table
// (core/isa_kernels.h): each member is the function of the same role.
struct FlashBf16Kernels {
  decltype(&qk_bf16_avx512) qk;
  decltype(&qk_rows_bf16_avx512) qk_rows;
  decltype(&pv_rows_bf16_avx512) pv_rows;
  decltype(&pack_p_bf16_avx512) pack_p;
  decltype(&softmax_pairs_bf16_avx512) softmax_pairs;
  decltype(&pack_v_bf16_avx512) pack_v;
  decltype(&pv_bf16_avx512) pv;
  decltype(&mac_pairs_bf16_avx512) mac_pairs;
  decltype(&round_rows_bf16_avx512) round_rows;
};

// kernels/avx512bf16/isa_table.cpp.
extern const FlashBf16Kernels flash_avx512bf16;

}  // namespace qkv::kernels
