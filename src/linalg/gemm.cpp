// gemm.cpp: sgemm on oneDNN, in fixed panels so results do not depend on the
// thread count, or on few rows on the dot-product kernels; sgemm_ref in
// plain loops.
#include "linalg/gemm.h"
#include "linalg/column_shares.h"
#include "linalg/gemm_common.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/isa_kernels.h"
#include "qkv/error.h"
#include "qkv/runtime.h"

namespace qkv::linalg {

using namespace qkv::kernels;  // the core's SIMD kernels and their tables

namespace {

// C is cut along its longer side (M rows or N columns) into panels; each
// panel is one oneDNN call on one thread, which packs its own copy of the
// shared operand, so panels should be few and large, but there must be enough
// of them for the threads. Up to 8 panels, at least 64 rows (or columns) each,
// a multiple of 16: 768 rows make 8 panels of 96, 384 make 6 of 64, 128 make 2.
// Measured at the GPT's shapes (bench/gemm): 93% of the FMA peak on 1 thread,
// 91–92% on 2, against 96% and 89–92% for oneDNN threading itself; 64-row panels
// throughout cost 1–2 points more, 128-row panels left a thread idle at 384.
int64_t panel_size(int64_t dim) {
  const int64_t eighth = (dim + 7) / 8;
  return std::max<int64_t>(64, (eighth + 15) / 16 * 16);
}

// C = alpha · A · op(B) + beta · C (+ bias) on the dot-product kernels (B
// [N, K]) or their [K, N] counterparts, C's columns shared between the
// threads (column_shares.h): each thread's B streams in one piece and its
// fetches run ahead across it. B [K, N] is read a short stretch of each of
// its K rows per column range, so there each thread keeps one range.
// Each element is one call's whole K sum, whatever the cut.
void dot_columns(const GemmDotKernels& dot, bool trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float beta, const float* bias, float* C, int64_t ldc) {
  const auto kernel = trans_b ? dot.f32 : dot.f32_kn;
  // Called from a region's thread (linear_runs' chunks): all of it here,
  // with no region of one thread to open and close.
  if (omp_in_parallel()) return kernel(M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
  const int threads = omp_get_max_threads();
  const int64_t chunk = trans_b ? chunk_columns(K * int64_t{sizeof(float)}, kDotBlockColumns)
                                : share_columns(N, threads, kKnBlockColumns);
  ColumnShares shares(N, chunk, threads);
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    for (int64_t lo, hi; shares.next(t, lo, hi);)
      kernel(M, hi - lo, K, alpha, A, lda, trans_b ? B + lo * ldb : B + lo, ldb, beta,
             bias ? bias + lo : nullptr, C + lo, ldc);
  }
}

// C = alpha · op(A) · op(B) + beta · C on oneDNN, in the fixed panels above.
void on_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  const bool split_m = M >= N;
  const int64_t dim = split_m ? M : N;
  const int64_t panel = panel_size(dim), panels = (dim + panel - 1) / panel;
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  int status = dnnl_success;  // the worst status of any panel (an enum cannot be reduced)
  // Inside this region oneDNN sees omp_in_parallel() and runs each call on
  // the calling thread. With one panel the region still runs (one thread
  // works) so that oneDNN never threads, and splits K, on its own.
#pragma omp parallel for schedule(static) reduction(max : status)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t lo = p * panel, n = std::min(panel, dim - lo);
    int s;
    if (split_m)  // rows lo..lo+n of op(A) and C
      s = dnnl_sgemm(ta, tb, n, N, K, alpha, trans_a ? A + lo : A + lo * lda, lda, B, ldb, beta,
                     C + lo * ldc, ldc);
    else  // columns lo..lo+n of op(B) and C
      s = dnnl_sgemm(ta, tb, M, n, K, alpha, A, lda, trans_b ? B + lo * ldb : B + lo, ldb, beta,
                     C + lo, ldc);
    status = std::max(status, s);
  }
  if (status != dnnl_success)
    throw Error("sgemm: oneDNN failed with status " + std::to_string(static_cast<int>(status)));
}

// sgemm and sgemm_bias (bias null: none).
void run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
         int64_t lda, const float* B, int64_t ldb, float beta, const float* bias, float* C,
         int64_t ldc) {
  check_gemm_args("sgemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  // oneDNN returns at once for K = 0 without scaling C; BLAS scales it.
  if (gemm_without_products(M, N, K, alpha, beta, C, ldc)) {
    if (bias) add_bias(M, N, bias, C, ldc);
    return;
  }
  if (!trans_a && M <= kDotRowsMax)
    if (const GemmDotKernels* dot = isa_kernels(active_isa()).gemm_dot; dot && (trans_b || dot->f32_kn))
      return dot_columns(*dot, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
  if (bias && beta == 0.0f) {  // the bias as C and beta = 1: the same bits, one pass fewer
#pragma omp parallel for schedule(static) if (M * N >= qkv::kParallelMin)
    for (int64_t i = 0; i < M; ++i) std::copy(bias, bias + N, C + i * ldc);
    return on_onednn(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 1.0f, C, ldc);
  }
  on_onednn(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (bias) add_bias(M, N, bias, C, ldc);
}

}  // namespace

std::pair<int64_t, int64_t> dot_range(int64_t N, int t, int threads, int64_t block) {
  const int64_t blocks = (N + block - 1) / block;
  const int64_t lo = blocks * t / threads * block;
  const int64_t hi = blocks * (t + 1) / threads * block;
  return {std::min(lo, N), std::min(hi, N)};
}

void check_gemm_args(const char* fn, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     int64_t lda, int64_t ldb, int64_t ldc) {
  auto fail = [fn](const std::string& what) { throw Error(std::string(fn) + ": " + what); };
  if (M < 0 || N < 0 || K < 0)
    fail("expected sizes >= 0, found M = " + std::to_string(M) + ", N = " + std::to_string(N) +
         ", K = " + std::to_string(K));
  const int64_t min_lda = std::max<int64_t>(1, trans_a ? M : K);
  const int64_t min_ldb = std::max<int64_t>(1, trans_b ? K : N);
  const int64_t min_ldc = std::max<int64_t>(1, N);
  if (lda < min_lda) fail("lda: expected >= " + std::to_string(min_lda) + ", found " + std::to_string(lda));
  if (ldb < min_ldb) fail("ldb: expected >= " + std::to_string(min_ldb) + ", found " + std::to_string(ldb));
  if (ldc < min_ldc) fail("ldc: expected >= " + std::to_string(min_ldc) + ", found " + std::to_string(ldc));
}

bool gemm_without_products(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C,
                           int64_t ldc) {
  if (M == 0 || N == 0) return true;
  if (K != 0 && alpha != 0.0f) return false;
  if (beta == 1.0f) return true;
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (beta == 0.0f) std::fill(c, c + N, 0.0f);
    else for (int64_t j = 0; j < N; ++j) c[j] *= beta;
  }
  return true;
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, nullptr, C, ldc);
}

void sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                const float* bias, float* C, int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, bias, C, ldc);
}

void add_bias(int64_t M, int64_t N, const float* bias, float* C, int64_t ldc) {
#pragma omp parallel for schedule(static) if (M * N >= qkv::kParallelMin)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] += bias[j];
}

void sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  check_gemm_args("sgemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      float& c = C[i * ldc + j];
      const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c;
      c = static_cast<float>(static_cast<double>(alpha) * acc + prior);
    }
}

}  // namespace qkv::linalg
