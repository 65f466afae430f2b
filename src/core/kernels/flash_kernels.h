// flash_kernels.h: the SIMD micro-kernels of the fast attention path, one
// table per instruction set, reached through the path's IsaKernels
// (core/isa_kernels.h), chosen at run time (qkv/runtime.h).
//
// The tile layout is "transposed": a score tile St holds keys in rows and
// queries in columns, St[j][i] = q_i · k_j, so that
//   - Q·Kᵀ broadcasts one key element against a vector of queries (K is read
//     in its natural [S, D] layout, never packed or transposed),
//   - the softmax's max and sum over keys are vertical (element-wise across
//     rows) operations, with no horizontal reductions,
//   - P·V broadcasts one weight P[j][i] against a vector of V's row j.
// Only Q is packed, once per work item: Qt[d][i] = q_i[d] · scale.
#pragma once

#include <cstdint>


namespace qkv::kernels {

// Queries per tile (columns of St): 4 AVX-512 vectors, 8 AVX2 vectors.
constexpr int kBR = 64;
// Keys per tile (rows of St). 64 keys of D = 128 keep the K and V tiles of a
// step (2 x 32 KiB) in L2 and St (16 KiB) in L1.
constexpr int kBC = 64;

struct FlashKernels {
  // St[j][i] = sum_d K[j*ldk + d] * Qt[d*kBR + i] for j < nj and the first
  // `ncols` columns (rounded up to a vector; Qt's padding columns are zero).
  // St [nj][kBR], K rows of D floats with stride ldk, Qt [D][kBR].
  void (*qk)(float* St, const float* K, int64_t ldk, int64_t nj, const float* Qt, int64_t D,
             int ncols);

  // Decode form of qk for few queries: St[j][i] = sum_d K[j*ldk + d] * Q[i*D + d]
  // for i < ncols, with Q in natural layout [ncols][D] (already scaled).
  // Vectors run along D, so no lane is wasted when ncols is 1.
  void (*qk_rows)(float* St, const float* K, int64_t ldk, int64_t nj, const float* Q, int64_t D,
                  int ncols);

  // One online-softmax step over the tile's nj rows (keys), per column i:
  //   m' = max(m, max_j St[j][i]);  St[j][i] = exp(St[j][i] - m');
  //   alpha[i] = exp(m - m');       l' = alpha[i] * l + sum_j St[j][i].
  // -inf scores give exactly 0; a column with no finite score so far keeps
  // m = -inf, l = 0 (alpha is then 0, never NaN).
  void (*softmax)(float* St, int64_t nj, int ncols, float* m, float* l, float* alpha);

  // O[i][:] = alpha[i] * O[i][:] + sum_j P[j][i] * V[j*ldv + :] for i < ncols.
  // O [kBR][Dv] (row stride Dv), P [nj][kBR].
  void (*pv)(float* O, const float* P, int64_t nj, int ncols, const float* V, int64_t ldv,
             int64_t Dv, const float* alpha);

  // W[i*ldw + j] = exp(St[j][i] - lse[i]) for j < nj, i < ncols (0 where
  // lse[i] = -inf): the exact weights from the saved log-sum-exp.
  void (*weights)(float* W, int64_t ldw, const float* St, int64_t nj, int ncols, const float* lse);

  // ---- the backward (flash_backward.cpp) ----
  // In place, St [nj][kBR]: St[j][i] = exp(St[j][i] - lse[i]), 0 where
  // lse[i] = -inf; whole vectors of columns, so lse [kBR] must be padded.
  // The same arithmetic as `weights`, so P is the forward's weights exactly.
  void (*probs)(float* St, int64_t nj, int ncols, const float* lse);

  // In place, dS [nj][kBR] holding dP: dS[j][i] = P[j][i] * (dS[j][i] - Dd[i])
  // * scale, times dcap[j][i] when dcap is not null (soft-cap's derivative).
  // Whole vectors of columns; Dd [kBR] padded. Scale is folded in here so
  // the products that follow are plain.
  void (*dscores)(float* dS, const float* P, int64_t nj, int ncols, const float* Dd,
                  const float* dcap, float scale);

  // C[r*ldc + e] += sum_{t < nt} A[r*ar + t*at] * B[t*ldb + e] for r < nr,
  // e < ne: the backward's three products (dQ += dS·K with A = dS read down
  // its columns; dK += dSᵀ·Q and dV += Pᵀ·dO with A read along rows). Each
  // C element is one chain of multiply-adds over t in order, however the
  // registers are blocked, so results do not depend on how a caller cuts
  // r or e (the backward relies on this for thread-count determinism).
  void (*mac)(float* C, int64_t ldc, const float* A, int64_t ar, int64_t at, const float* B,
              int64_t ldb, int64_t nr, int64_t nt, int64_t ne);

  // ---- bfloat16 inputs (flash_block.cpp) ----
  // dst[r*ldd + c] = float(src[r*lds + c]) for r < rows, c < cols: a bf16 K
  // or V tile [rows][cols] (bit patterns, rows lds apart) widened to float32,
  // exactly (a bf16 is a float32's top half), so the float32 kernels above
  // run on it unchanged. Memory sees only the bf16 bytes: the widened tile
  // lives in L1/L2 scratch.
  void (*widen_bf16)(float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int64_t rows,
                     int64_t cols);

  // ---- check_finite fused into decode ----
  // acc[0..16) += x - x over the first ncols columns of St's nj rows: stays
  // 0 while every score is finite, becomes NaN once one is not (NaN, or
  // +-inf: inf - inf). Run on the raw scores, before any mask adds -inf: a
  // non-finite raw score means a NaN or Inf in a key it read (q is checked
  // before), or a dot product beyond float32's range. A few vector ops per
  // tile, where scanning K itself would cost as much as the dot products.
  void (*check_scores)(const float* St, int64_t nj, int ncols, float* acc);
};

// The tables of kernels/{scalar,avx2,avx512}/: avx512bf16 and amx use
// avx512's for float32 (their IsaKernels, core/isa_kernels.h, say which).
extern const FlashKernels flash_scalar;
extern const FlashKernels flash_avx2;
extern const FlashKernels flash_avx512;

}  // namespace qkv::kernels
