// gemm_dot_kernels.h: the GEMM for few rows against a weight stored one
// output per row, C = alpha · A · Bᵀ + beta · C with A [M, K] and B [N, K]
// (a Linear layer's forward on one short text, or one decoded token), as
// dot products of A's rows with B's rows, both read where they lie: nothing
// is packed, so B streams from memory once and every K sum runs in
// registers. Reached through the path's table (core/isa_kernels.h):
// kernels/avx512/gemm_dot_avx512.cpp for float32 from avx512 up,
// kernels/avx512bf16/gemm_dot_bf16.cpp for bfloat16 from avx512bf16 up.
//
// Each C element is one call's sum of its K products: 16 lanes (32 for
// bf16 pairs) each sum the k of their residue in order, then the lanes are
// added in a fixed tree. So an element's bits depend on K and its operands
// alone, never on N, which block of C a call covers or which thread makes
// it, nor on M from 2 rows up. One row (M = 1, a decoded token) sums each
// lane's vectors in four chains (vector v in chain v mod 4), added before
// the tree: bits of its own, the same for any N and thread count, and
// wherever B's rows lie (a row off a 64-byte line is read as its aligned
// lines, put back together in registers).
//
// And the float32 GEMM against a weight packed once in panels (f32_panels,
// kernels/avx512/gemm_panels_avx512.cpp): an encoder's matrices, for any
// number of rows.
#pragma once

#include <cstdint>

namespace qkv::kernels {

// Rows of A at most for which the callers pick these kernels: with more,
// the packed GEMMs' register tiles reuse each loaded weight more than the
// dot products' 4-row blocks do. Measured on Zen 4 over the MiniLM's 24
// Linear weights (K 384 and 1536, N 384 to 1536, 2 threads, the machine
// shared with a build): float32 in 3.8 ms against oneDNN's 6.4 ms at 16
// rows, 6.2 against 8.2 at 32, 1.1 against 2.0 at one row.
constexpr int64_t kDotRowsMax = 32;

// Rows of B one register block of the kernels covers: a caller that
// splits N between threads gives each a multiple of it.
constexpr int64_t kDotBlockColumns = 6;

// Columns of B one panel of the packed layout holds (f32_panels below),
// and where that layout keeps B's element (o, k) for rows of K elements.
constexpr int64_t kPanelColumns = 48;
constexpr int64_t panel_index(int64_t o, int64_t k, int64_t K) {
  return o / kPanelColumns * kPanelColumns * K + k * kPanelColumns + o % kPanelColumns;
}

struct GemmDotKernels {
  // C[i][j] = alpha · Σ_k A[i][k] B[j][k] + beta · C[i][j], then + bias[j]
  // (bias null: none), rounded separately, for i < M, j < N, in float32
  // (beta = 0 never reads C). Rows lda, ldb, ldc apart.
  void (*f32)(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, const float* bias, float* C, int64_t ldc);
  // The same with A and B bfloat16 bit patterns, the products of each pair
  // of k summed by vdpbf16ps in float32 (bf16 denormals count as 0). Null
  // below avx512bf16.
  void (*bf16)(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, const float* bias, float* C,
               int64_t ldc);
  // The same two against B stored [K, N] (a weight one input per row, as
  // GPT-2's Conv1D keeps it): C[i][j] = alpha · Σ_k A[i][k] B[k][j] + ...
  // (kernels/gemm_kn_blocks.h). Each element's K sum runs in order of k
  // (bf16: of pairs of k, one vdpbf16ps each) in one lane: its bits depend
  // on K and its operands alone, for any M, N and thread.
  void (*f32_kn)(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, const float* bias, float* C, int64_t ldc);
  void (*bf16_kn)(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float beta, const float* bias, float* C,
                  int64_t ldc);
  // C [M, N] = A [M, K] · Bᵀ + bias (bias [N], or null: none) for any M,
  // B [N, K] packed in panels of kPanelColumns columns: panel p holds
  // B's rows 48p .. 48p + 47 interleaved, element (k, c) at
  // P[p · 48 K + 48 k + c], the last panel's missing rows zeros (packed once
  // at load: linalg/gemm.h, pack_panels). Each element is one lane's chain of
  // fused multiply-adds from 0 in order of k, then + bias[j]: its bits
  // depend on K and its operands alone, for any M, N and thread; plain
  // loops doing the same (std::fma) give the same bits
  // (kernels/avx512/gemm_panels_avx512.cpp).
  void (*f32_panels)(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* P,
                     const float* bias, float* C, int64_t ldc);
};

// The tables of the two files above (a path's IsaKernels points at one),
// and the float32 kernel both hold.
extern const GemmDotKernels gemm_dot_avx512;
extern const GemmDotKernels gemm_dot_avx512bf16;
void gemm_dot_f32_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                         int64_t lda, const float* B, int64_t ldb, float beta, const float* bias,
                         float* C, int64_t ldc);
void gemm_kn_f32_avx512(int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, const float* bias,
                        float* C, int64_t ldc);
void gemm_panels_f32_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                            const float* P, const float* bias, float* C, int64_t ldc);

}  // namespace qkv::kernels
