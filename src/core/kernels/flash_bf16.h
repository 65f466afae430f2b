// flash_bf16.h: the AVX512-BF16 micro-kernel of the forward's Q·Kᵀ for
// bfloat16 inputs (avx512bf16/flash_avx512bf16.cpp), called only when
// active_isa() is Isa::avx512bf16.
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

#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

// Pairs of D packed per query: D odd gets a zero high half in its last pair.
inline int64_t bf16_pairs(int64_t D) { return (D + 1) / 2; }

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

// O[i][:] = alpha[i] * O[i][:] + sum_j P[j][i] * V[j*ldv + :] for i < ncols <= 4,
// with V [nj][Dv] bf16 in place, widened in registers: decode's P·V, which
// reads each V row once, so widening it into scratch first would only add
// a store and a load per element. O [ncols][Dv], P [nj][kBR] float32.
void pv_rows_bf16_avx512(float* O, const float* P, int64_t nj, int ncols, const uint16_t* V,
                         int64_t ldv, int64_t Dv, const float* alpha);

}  // namespace qkv::kernels
