// gemm_bench.cpp: fp32 GEMM at the small GPT's shapes, one backend per binary.
//
// Issue 4 asks for the GEMM backend to be chosen by measurement on this
// machine. Every linear layer of the model (B·T = 12·64 = 768 rows, C = 128)
// runs three GEMMs per training step, all row-major:
//   forward       out  [BT, OC] = inp [BT, C] · Wᵀ        (N, T)  M=BT N=OC K=C
//   backward data dinp [BT, C] += dout [BT, OC] · W      (N, N)  M=BT N=C  K=OC
//   backward wt   dW   [OC, C] += doutᵀ [OC, BT] · inp   (T, N)  M=OC N=C  K=BT
// for (C, OC) = (128, 384) fused QKV, (128, 128) attention output, (128, 512)
// MLP up, (512, 128) MLP down, (128, 65) the tied LM head. The binary is built
// once per backend (OpenBLAS and BLIS both export cblas_sgemm, so they cannot
// share one), times each case at 1 and 2 threads, and prints GFLOP/s against
// the FMA peak the same binary measures (src/core/runtime/peak.cpp).
//
// Fixed seed, a warm-up, then the best of kTrials trials, each as many calls
// as fill ~25 ms. The best, not the median: on a shared machine another job
// that takes a core stalls a 2-thread OpenMP GEMM at every barrier (10-40x
// slower trials), and what is measured here is what the library can do.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "qkv/peak.h"

#if defined(QKV_BENCH_QKV)
#include "model/gemm.h"
#elif defined(QKV_BENCH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#elif defined(QKV_BENCH_OPENBLAS) || defined(QKV_BENCH_BLIS)
#include <cblas.h>
#if defined(QKV_BENCH_BLIS)
#include <blis.h>
#endif
#elif defined(QKV_BENCH_EIGEN)
#include <Eigen/Core>
#endif

namespace {

#if defined(QKV_BENCH_QKV)
// What qkv ships (src/model/gemm.cpp): oneDNN on one thread per fixed
// panel of C, our OpenMP threads over the panels.
const char* kName = "qkv::kernels::sgemm (oneDNN, fixed panels)";
void set_threads(int t) { omp_set_num_threads(t); }
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  qkv::kernels::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(QKV_BENCH_DNNL)
const char* kName = "oneDNN dnnl_sgemm";
void set_threads(int t) { omp_set_num_threads(t); }  // Debian's build: OpenMP runtime
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(QKV_BENCH_OPENBLAS) || defined(QKV_BENCH_BLIS)
#if defined(QKV_BENCH_OPENBLAS)
const char* kName = "OpenBLAS cblas_sgemm";
extern "C" void openblas_set_num_threads(int);
void set_threads(int t) {
  omp_set_num_threads(t);
  openblas_set_num_threads(t);
}
#else
const char* kName = "BLIS cblas_sgemm";
void set_threads(int t) {
  omp_set_num_threads(t);
  bli_thread_set_num_threads(t);
}
#endif
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
#elif defined(QKV_BENCH_EIGEN)
const char* kName = "Eigen " QKV_BENCH_EIGEN_FLAGS;
void set_threads(int t) {
  omp_set_num_threads(t);
  Eigen::setNbThreads(t);
}
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using CMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  Map c(C, M, N, Eigen::OuterStride<>(ldc));
  CMap a(A, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
  CMap b(B, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
  if (beta == 0.0f) c.setZero();
  else if (beta != 1.0f) c *= beta;
  if (!ta && !tb) c.noalias() += alpha * a * b;
  else if (!ta && tb) c.noalias() += alpha * a * b.transpose();
  else if (ta && !tb) c.noalias() += alpha * a.transpose() * b;
  else c.noalias() += alpha * a.transpose() * b.transpose();
}
#else
#error "define one of QKV_BENCH_QKV, QKV_BENCH_DNNL, QKV_BENCH_OPENBLAS, QKV_BENCH_BLIS, QKV_BENCH_EIGEN"
#endif

using Clock = std::chrono::steady_clock;

struct Case {
  const char* layer;
  const char* pass;
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  int per_step;  // how many times one training step of the 4-layer model runs it
};

std::vector<Case> model_cases() {
  constexpr int64_t BT = 12 * 64, L = 4;
  struct Lin { const char* name; int64_t C, OC; int64_t count; };
  const Lin lins[] = {{"qkv 128->384", 128, 384, L},
                      {"attn-out 128->128", 128, 128, L},
                      {"mlp-up 128->512", 128, 512, L},
                      {"mlp-down 512->128", 512, 128, L},
                      {"lm-head 128->65", 128, 65, 1}};
  std::vector<Case> cases;
  for (const Lin& l : lins) {
    const int n = static_cast<int>(l.count);
    cases.push_back({l.name, "fwd    NT", false, true, BT, l.OC, l.C, 0.0f, n});
    cases.push_back({l.name, "bwd-in NN", false, false, BT, l.C, l.OC, 1.0f, n});
    cases.push_back({l.name, "bwd-w  TN", true, false, l.OC, l.C, BT, 1.0f, n});
  }
  return cases;
}

// Best seconds per call of one case at the current thread count.
double time_case(const Case& c, const std::vector<float>& A, const std::vector<float>& B,
                 std::vector<float>& Cm) {
  const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N, ldc = c.N;
  auto call = [&] {
    gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, Cm.data(), ldc);
  };
  for (int i = 0; i < 5; ++i) call();  // warm-up: caches, thread team, JIT kernels
  // Calls per trial from one timed call, aiming at ~25 ms.
  auto t0 = Clock::now();
  call();
  const double one = std::chrono::duration<double>(Clock::now() - t0).count();
  const int reps = std::max(1, static_cast<int>(0.025 / std::max(one, 1e-7)));
  constexpr int kTrials = 7;
  std::vector<double> trials;
  for (int t = 0; t < kTrials; ++t) {
    t0 = Clock::now();
    for (int r = 0; r < reps; ++r) call();
    trials.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return *std::min_element(trials.begin(), trials.end());
}

}  // namespace

int main(int argc, char** argv) {
  const int max_threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const qkv::Isa isa = qkv::detected_isa();
  std::vector<double> peak(max_threads + 1);
  for (int t = 1; t <= max_threads; ++t) peak[t] = qkv::measure_fma_gflops(isa, t, 0.3);

  const std::vector<Case> cases = model_cases();
  int64_t max_elems = 0;
  for (const Case& c : cases)
    max_elems = std::max({max_elems, c.M * c.K, c.K * c.N, c.M * c.N});
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> A(max_elems), B(max_elems), Cm(max_elems);
  for (float& x : A) x = u(rng);
  for (float& x : B) x = u(rng);
  for (float& x : Cm) x = u(rng);

  std::printf("## %s (peak", kName);
  for (int t = 1; t <= max_threads; ++t) std::printf(" %.0f", peak[t]);
  std::printf(" GFLOP/s at 1..%d threads, isa %s)\n\n", max_threads, qkv::isa_name(isa));
#if defined(QKV_BENCH_OPENBLAS)
  std::printf("OpenBLAS core: %s\n\n", openblas_get_corename());
#endif
  std::printf("| layer | pass | M×N×K |");
  for (int t = 1; t <= max_threads; ++t) std::printf(" %dT µs | %dT GFLOP/s | %dT %%peak |", t, t, t);
  std::printf("\n|---|---|---|");
  for (int t = 1; t <= max_threads; ++t) std::printf("---:|---:|---:|");
  std::printf("\n");
  std::vector<double> step_s(max_threads + 1, 0.0);
  double step_flops = 0.0;
  std::vector<std::vector<double>> secs(cases.size(), std::vector<double>(max_threads + 1));
  for (int t = 1; t <= max_threads; ++t) {
    set_threads(t);
    for (size_t i = 0; i < cases.size(); ++i) secs[i][t] = time_case(cases[i], A, B, Cm);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const double flops = 2.0 * c.M * c.N * c.K;
    step_flops += flops * c.per_step;
    std::printf("| %s | %s | %lld×%lld×%lld |", c.layer, c.pass, (long long)c.M,
                (long long)c.N, (long long)c.K);
    for (int t = 1; t <= max_threads; ++t) {
      const double g = flops / secs[i][t] * 1e-9;
      step_s[t] += secs[i][t] * c.per_step;
      std::printf(" %.1f | %.0f | %.0f%% |", secs[i][t] * 1e6, g, 100.0 * g / peak[t]);
    }
    std::printf("\n");
  }
  std::printf("| **one training step's GEMMs** | | %.2f GFLOP |", step_flops * 1e-9);
  for (int t = 1; t <= max_threads; ++t) {
    const double g = step_flops / step_s[t] * 1e-9;
    std::printf(" %.0f | %.0f | %.0f%% |", step_s[t] * 1e6, g, 100.0 * g / peak[t]);
  }
  std::printf("\n\n");
  return 0;
}
