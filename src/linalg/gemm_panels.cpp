// gemm_panels.cpp: sgemm_panels (contract in linalg/gemm.h): the avx512
// path's kernel, or plain loops giving the same bits, on each thread's
// panels.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/isa_kernels.h"
#include "linalg/gemm.h"
#include "linalg/gemm_common.h"
#include "qkv/runtime.h"

namespace qkv::linalg {

using namespace qkv::kernels;  // the core's SIMD kernels and their tables

namespace {

// f32_panels's contract in plain loops: one std::fma chain an element.
void panels_loops(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* P,
                  const float* bias, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s = std::fma(A[i * lda + k], P[panel_index(j, k, K)], s);
      C[i * ldc + j] = bias ? s + bias[j] : s;
    }
}

}  // namespace

int64_t panels_size(int64_t N, int64_t K) {
  return (N + kPanelColumns - 1) / kPanelColumns * kPanelColumns * K;
}

void sgemm_panels(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* P,
                  const float* bias, float* C, int64_t ldc) {
  // sgemm's checks, for A · Bᵀ (the panels' own stride is K).
  check_gemm_args("sgemm_panels", false, true, M, N, K, lda, std::max<int64_t>(1, K), ldc);
  if (M == 0 || N == 0) return;
  const GemmDotKernels* dot = isa_kernels(active_isa()).gemm_dot;
  const auto kernel = dot && dot->f32_panels ? dot->f32_panels : panels_loops;
#pragma omp parallel
  {
    const auto [lo, hi] = dot_range(N, omp_get_thread_num(), omp_get_num_threads(), kPanelColumns);
    if (lo < hi) kernel(M, hi - lo, K, A, lda, P + lo * K, bias ? bias + lo : nullptr, C + lo, ldc);
  }
}

}  // namespace qkv::linalg
