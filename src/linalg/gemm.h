// linalg/gemm.h: C = alpha · op(A) · op(B) + beta · C in float32, row-major
// (sgemm), and with bfloat16 operands (gemm_bf16).
//
// op(A) is [M, K] (A stored [M, K] with row stride lda, or [K, M] when
// trans_a), op(B) is [K, N] (B stored [K, N] with row stride ldb, or [N, K]
// when trans_b), C is [M, N] with row stride ldc. As in BLAS, beta = 0 never
// reads C (NaN in C does not propagate), and M, N or K may be 0.
//
// The backend is oneDNN's sgemm, chosen by measurement (bench/gemm/, figures
// in the README): 93% of this machine's FMA peak on one thread and 92% on
// two at the GPT's shapes, where OpenBLAS, BLIS and Eigen reach 66–79% on
// two. oneDNN picks its code path (AVX-512, AVX2, SSE4.1, plain C++) at run
// time, so the binary runs on any x86-64.
#pragma once

#include <cstdint>

#include "qkv/export.h"
#include "qkv/tensor.h"  // bfloat16

namespace qkv::linalg {

// Threads: the caller's OpenMP thread count (omp_set_num_threads or
// OMP_NUM_THREADS); called inside a parallel region it runs on the calling
// thread alone. Results are bitwise identical for any thread count: C is cut
// into fixed panels that depend on the shape only, and each panel is one
// single-threaded oneDNN call, so no K sum is ever split between threads
// (oneDNN's own threading splits K for wide machines, which changes bits).
// With op(A) = A and at most kDotRowsMax rows (core/gemm_dot_kernels.h: a
// Linear's forward on a short text, a decoded token), from avx512 up the
// dot-product kernels run instead (op(B) = Bᵀ, or their [K, N] counterparts
// for op(B) = B), their columns split between the threads, each element
// one thread's whole K sum.
// Throws qkv::Error on negative sizes or leading dimensions too small.
QKV_API void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                   int64_t ldc);

// sgemm, then every row of C adds bias [N]: C = alpha · op(A) · op(B) + beta ·
// C + bias. With beta = 0 (a Linear layer's forward) that is bitwise what
// writing the bias into C and calling sgemm with beta = 1 gives, without
// that pass over C and its threads on the dot-product kernels, which add
// the bias as they store each sum.
QKV_API void sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                        const float* bias, float* C, int64_t ldc);

// The same contract in plain loops: each output's K products summed in double
// in order k = 0..K-1, then alpha · sum + beta · C rounded to float once.
// For tests; about 1 GFLOP/s.
QKV_API void sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                       int64_t ldc);

// A float32 weight B [N, K] (a Linear's [out, in]) packed once for the
// products of any number of rows: panels of kernels::kPanelColumns (48) of
// its rows, panel p holding element (o, k) at P[p · 48 K + 48 k + o - 48 p],
// the last panel's missing rows zeros (core/gemm_dot_kernels.h). panels_size
// is the floats P takes.
QKV_API int64_t panels_size(int64_t N, int64_t K);

// C [M, N] = A [M, K] · Bᵀ + bias (bias [N], or null), B packed in P as
// above, rows lda and ldc apart. The panels are shared out between the
// caller's threads, each element one fused multiply-add chain in order of k
// (then + bias): the same bits for any thread count and any M, from the
// avx512 path's kernel or, below it, from plain loops. Throws qkv::Error on
// negative sizes or leading dimensions too small.
QKV_API void sgemm_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* P,
                          const float* bias, float* C, int64_t ldc);

// Mixed precision: C = alpha · op(A) · op(B) + beta · C with op(A) and op(B)
// rounded to bfloat16 (to nearest even), their products summed in float32;
// A, B and C stay float32 in memory (the rounding happens as they are
// packed). Same arguments, checks and beta = 0 rule as sgemm.
//   AVX512-BF16: our vdpbf16ps micro-kernel (gemm_bf16_avx512.cpp); bf16
//     denormals count as 0 (the instruction's DAZ) and float32 sums that
//     fall below 2^-126 are flushed to 0.
//   AVX512-BF16 with op(A) = A, op(B) = Bᵀ and M <= kDotRowsMax (a Linear's
//     forward on a short text): dot products of A's and B's rounded rows
//     (core/gemm_dot_kernels.h), each element's K sum in 32 lanes then a
//     fixed tree; a bfloat16 B (a weight kept rounded) is read where it
//     lies, half the bytes of float32 and no packing.
//   AMX: our tile blocks (gemm_bf16_amx.cpp), the same packed pairs (for
//     op(A) = Aᵀ gathered across A's rows), summed in the tiles' order.
//   other CPUs: the rounded operands widened back to float32 and sgemm (the
//     same products, exact in float32, summed in another order).
// Results are bitwise identical for any thread count: each C element is one
// thread's K sum, in an order set by the path and the shape alone.
QKV_API void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                       int64_t ldc);

// gemm_bf16, then every row of C adds bias [N]: C = alpha · op(A) · op(B) +
// beta · C + bias. With beta = 0 (a Linear layer's forward) that is bitwise
// what writing the bias into C and calling gemm_bf16 with beta = 1 gives, on
// every path, with one pass over C fewer on AVX512-BF16, where the
// micro-tile adds the bias to its rounded result as it stores it.
QKV_API void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            const float* bias, float* C, int64_t ldc);

// The same with one operand already in bfloat16 (a Linear layer's input
// stored rounded by its producer under mixed precision): the products, and
// so the bits, of passing the float32 values they were rounded from, with
// half the bytes to read; op(A) = A with K and lda even is read in place,
// with no packing at all.
QKV_API void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const bfloat16* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                       int64_t ldc);
QKV_API void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, const bfloat16* B, int64_t ldb, float beta, float* C,
                       int64_t ldc);
QKV_API void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                            const bfloat16* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            const float* bias, float* C, int64_t ldc);
// A Linear's weight kept rounded beside its float32 master copy (B, in
// bfloat16), its input in either type.
QKV_API void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                            const float* A, int64_t lda, const bfloat16* B, int64_t ldb, float beta,
                            const float* bias, float* C, int64_t ldc);
QKV_API void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                            const bfloat16* A, int64_t lda, const bfloat16* B, int64_t ldb, float beta,
                            const float* bias, float* C, int64_t ldc);

// The same contract in plain loops: sgemm_ref on the operands rounded to bf16.
QKV_API void gemm_bf16_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                           int64_t ldc);

}  // namespace qkv::linalg
