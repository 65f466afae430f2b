// gemm_bench.cpp: GEMM at the small GPT's shapes, one backend per binary
// (float32, and bf16 x bf16 -> float32 for mixed precision: qkv's own
// gemm_bf16, oneDNN's matmul, MKL's cblas_gemm_bf16bf16f32).
//
// The GEMM backend is chosen by measurement on this
// machine. Every linear layer of the model (B·T = 12·64 = 768 rows, C = 128)
// runs three GEMMs per training step, all row-major:
//   forward       out  [BT, OC] = inp [BT, C] · Wᵀ        (N, T)  M=BT N=OC K=C
//   backward data dinp [BT, C] += dout [BT, OC] · W      (N, N)  M=BT N=C  K=OC
//   backward wt   dW   [OC, C] += doutᵀ [OC, BT] · inp   (T, N)  M=OC N=C  K=BT
// for (C, OC) = (128, 384) fused QKV, (128, 128) attention output, (128, 512)
// MLP up, (512, 128) MLP down, (128, 65) the tied LM head. The binary is built
// once per backend (OpenBLAS and BLIS both export cblas_sgemm, so they cannot
// share one), times each case at 1 and 2 threads, and prints GFLOP/s against
// the FMA peak the same binary measures (src/support/peak.cpp).
//
// Fixed seed, a warm-up, then the best of kTrials trials, each as many calls
// as fill ~25 ms. The best, not the median: on a shared machine another job
// that takes a core stalls a 2-thread OpenMP GEMM at every barrier (10-40x
// slower trials), and what is measured here is what the library can do.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/peak.h"
#include "qkv/tensor.h"

#if defined(QKV_BENCH_QKV)
#include "linalg/gemm.h"
#elif defined(QKV_BENCH_QKV_BF16)
#include "linalg/gemm.h"
#elif defined(QKV_BENCH_DNNL) || defined(QKV_BENCH_DNNL_BF16)
#include <oneapi/dnnl/dnnl.h>
#elif defined(QKV_BENCH_MKL) || defined(QKV_BENCH_MKL_BF16)
#include <mkl.h>
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
// What qkv ships (src/linalg/gemm.cpp): oneDNN on one thread per fixed
// panel of C, our OpenMP threads over the panels.
const char* kName = "qkv::linalg::sgemm (oneDNN, fixed panels)";
void set_threads(int t) { omp_set_num_threads(t); }
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  qkv::linalg::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(QKV_BENCH_DNNL)
const char* kName = "oneDNN dnnl_sgemm";
void set_threads(int t) { omp_set_num_threads(t); }  // Debian's build: OpenMP runtime
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(QKV_BENCH_QKV_BF16)
// What `qkv train --dtype bf16` runs (src/linalg/gemm_bf16.cpp): operands
// rounded to bf16 as they are packed, our vdpbf16ps micro-kernel on
// AVX512-BF16 (elsewhere the rounded operands widened and sgemm).
const char* kName = "qkv::linalg::gemm_bf16 (bf16 x bf16 -> f32, rounded while packing)";
void set_threads(int t) { omp_set_num_threads(t); }
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  qkv::linalg::gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(QKV_BENCH_DNNL_BF16)
// Mixed precision's candidate: A and B rounded to bf16 (per call,
// as a training step must do for its activations), a oneDNN matmul primitive
// bf16 x bf16 -> float32 (beta = 1 as a sum post-op), one primitive per
// shape, created once. oneDNN threads it itself (OpenMP).
const char* kName = "oneDNN matmul bf16 x bf16 -> f32 (inputs rounded per call)";
void set_threads(int t) { omp_set_num_threads(t); }
void check(dnnl_status_t st, const char* what) {
  if (st != dnnl_success) {
    std::fprintf(stderr, "oneDNN: %s failed (status %d)\n", what, static_cast<int>(st));
    std::exit(1);
  }
}
struct Matmul {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  dnnl_memory_desc_t a, b, c;
  dnnl_primitive_t prim;
};
dnnl_engine_t engine() {
  static dnnl_engine_t e = [] {
    dnnl_engine_t x;
    check(dnnl_engine_create(&x, dnnl_cpu, 0), "engine");
    return x;
  }();
  return e;
}
// A [M, K] (or [K, M] when ta) as a strided view in bf16, and likewise B.
Matmul& matmul_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta) {
  static std::vector<Matmul> cache;
  for (Matmul& m : cache)
    if (m.ta == ta && m.tb == tb && m.M == M && m.N == N && m.K == K && m.beta == beta) return m;
  Matmul m{ta, tb, M, N, K, beta, {}, {}, {}, nullptr};
  const dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  const dnnl_dims_t as = {ta ? 1 : K, ta ? M : 1}, bs = {tb ? 1 : N, tb ? K : 1}, cs = {N, 1};
  check(dnnl_memory_desc_init_by_strides(&m.a, 2, ad, dnnl_bf16, as), "a desc");
  check(dnnl_memory_desc_init_by_strides(&m.b, 2, bd, dnnl_bf16, bs), "b desc");
  check(dnnl_memory_desc_init_by_strides(&m.c, 2, cd, dnnl_f32, cs), "c desc");
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &m.a, &m.b, nullptr, &m.c), "matmul desc");
  dnnl_primitive_attr_t attr;
  check(dnnl_primitive_attr_create(&attr), "attr");
  if (beta != 0.0f) {
    dnnl_post_ops_t ops;
    check(dnnl_post_ops_create(&ops), "post ops");
    check(dnnl_post_ops_append_sum(ops, beta), "sum");
    check(dnnl_primitive_attr_set_post_ops(attr, ops), "set post ops");
  }
  dnnl_primitive_desc_t pd;
  check(dnnl_primitive_desc_create(&pd, &desc, attr, engine(), nullptr), "primitive desc");
  check(dnnl_primitive_create(&m.prim, pd), "primitive");
  cache.push_back(m);
  return cache.back();
}
uint16_t to_bf16(float x) { return qkv::bf16_from_float(x).bits; }
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  (void)alpha, (void)lda, (void)ldb, (void)ldc;  // 1 and packed, as the cases are
  static std::vector<uint16_t> a16, b16;
  a16.resize(static_cast<size_t>(M * K));
  b16.resize(static_cast<size_t>(K * N));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M * K; ++i) a16[i] = to_bf16(A[i]);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < K * N; ++i) b16[i] = to_bf16(B[i]);
  Matmul& m = matmul_for(ta, tb, M, N, K, beta);
  static dnnl_stream_t stream = [] {
    dnnl_stream_t x;
    check(dnnl_stream_create(&x, engine(), dnnl_stream_default_flags), "stream");
    return x;
  }();
  dnnl_memory_t am, bm, cm;
  check(dnnl_memory_create(&am, &m.a, engine(), a16.data()), "a mem");
  check(dnnl_memory_create(&bm, &m.b, engine(), b16.data()), "b mem");
  check(dnnl_memory_create(&cm, &m.c, engine(), C), "c mem");
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  check(dnnl_primitive_execute(m.prim, stream, 3, args), "execute");
  check(dnnl_stream_wait(stream), "wait");
  dnnl_memory_destroy(am), dnnl_memory_destroy(bm), dnnl_memory_destroy(cm);
}
#elif defined(QKV_BENCH_MKL)
const char* kName = "MKL cblas_sgemm (GNU OpenMP threading)";
void set_threads(int t) {
  omp_set_num_threads(t);
  mkl_set_num_threads(t);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#elif defined(QKV_BENCH_MKL_BF16)
// As the oneDNN candidate: A and B rounded to bf16 per call, then MKL.
const char* kName = "MKL cblas_gemm_bf16bf16f32 (inputs rounded per call)";
void set_threads(int t) {
  omp_set_num_threads(t);
  mkl_set_num_threads(t);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  static std::vector<MKL_BF16> a16, b16;
  const int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb;
  a16.resize(static_cast<size_t>(na));
  b16.resize(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < na; ++i) a16[i] = qkv::bf16_from_float(A[i]).bits;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < nb; ++i) b16[i] = qkv::bf16_from_float(B[i]).bits;
  cblas_gemm_bf16bf16f32(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                         tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, a16.data(), lda,
                         b16.data(), ldb, beta, C, ldc);
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
#error "define one of QKV_BENCH_QKV, QKV_BENCH_QKV_BF16, QKV_BENCH_MKL, QKV_BENCH_MKL_BF16, QKV_BENCH_DNNL, QKV_BENCH_DNNL_BF16, QKV_BENCH_OPENBLAS, QKV_BENCH_BLIS, QKV_BENCH_EIGEN"
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

#if defined(QKV_BENCH_DNNL_BF16) || defined(QKV_BENCH_QKV_BF16) || defined(QKV_BENCH_MKL_BF16)
// The backend computes what it should: every case once (beta 0) against
// double sums of the same bf16-rounded inputs; exits 1 on a mismatch.
void verify(const std::vector<Case>& cases, const std::vector<float>& A, const std::vector<float>& B) {
  auto bf = [](float x) { return static_cast<double>(qkv::bf16_to_float(qkv::bf16_from_float(x))); };
  for (const Case& c : cases) {
    std::vector<float> C(static_cast<size_t>(c.M * c.N));
    const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
    gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), c.N);
    double worst = 0;
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double want = 0, mag = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double x = bf(c.ta ? A[k * lda + i] : A[i * lda + k]) * bf(c.tb ? B[j * ldb + k] : B[k * ldb + j]);
          want += x, mag += std::abs(x);
        }
        worst = std::max(worst, std::abs(C[i * c.N + j] - want) / (mag + 1e-30));
      }
    if (worst > 1e-5) {
      std::fprintf(stderr, "%s %s: relative error %g\n", c.layer, c.pass, worst);
      std::exit(1);
    }
  }
}
#endif

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
#if defined(QKV_BENCH_DNNL_BF16) || defined(QKV_BENCH_QKV_BF16) || defined(QKV_BENCH_MKL_BF16)
  verify(cases, A, B);
#endif

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
