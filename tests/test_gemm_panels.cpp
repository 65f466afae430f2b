// sgemm_panels (linalg/gemm.h): C = A · Bᵀ + bias with B packed in panels of
// 48 of its rows, on every ISA path (the avx512 path's kernel, plain loops
// below it), against sgemm_ref within its rounding bound, and bit for bit
// against one std::fma chain an element, the contract's own statement of
// the sums (core/gemm_dot_kernels.h). The packing here is written from the
// layout the contract gives, not taken from the model's loader. Sizes
// around the kernel's blocks: 8 rows of A, 48 columns a panel, 16 a vector.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/gemm_dot_kernels.h"
#include "gemm_check.h"
#include "isa_fixture.h"
#include "linalg/gemm.h"
#include "qkv/error.h"

using namespace qkv;
using kernels::kPanelColumns;

namespace {

using VecF = std::vector<float>;

VecF random_vec(std::mt19937& rng, int64_t n) { return test::random_floats(rng, n); }

// B [N, K] (rows ldb apart) in panels: element (o, k) at
// P[(o / 48) · 48 K + 48 k + o % 48], zeros past the last row.
VecF pack(const float* B, int64_t ldb, int64_t N, int64_t K) {
  const int64_t panels = (N + kPanelColumns - 1) / kPanelColumns;
  VecF P(static_cast<size_t>(std::max<int64_t>(1, panels * kPanelColumns * K)), std::nanf(""));
  EXPECT_EQ(linalg::panels_size(N, K), panels * kPanelColumns * K);
  for (int64_t o = 0; o < panels * kPanelColumns; ++o)
    for (int64_t k = 0; k < K; ++k)
      P[(o / kPanelColumns) * kPanelColumns * K + k * kPanelColumns + o % kPanelColumns] =
          o < N ? B[o * ldb + k] : 0.0f;
  return P;
}

// sgemm_panels as a GemmFn for check_gemm (op(B) = Bᵀ, alpha 1, beta 0).
void panels_as_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  EXPECT_FALSE(ta);
  EXPECT_TRUE(tb);
  EXPECT_EQ(alpha, 1.0f);
  EXPECT_EQ(beta, 0.0f);
  const VecF P = pack(B, ldb, N, K);
  linalg::sgemm_panels(M, N, K, A, lda, P.data(), nullptr, C, ldc);
}

class GemmPanels : public test::OnIsa {};

TEST_P(GemmPanels, MatchesReference) {
  std::mt19937 rng(61);
  int variant = 0;
  for (int64_t M : {1, 7, 8, 9, 16, 33})
    for (int64_t N : {1, 16, 47, 48, 49, 100})
      for (int64_t K : {0, 1, 17, 64}) {
        const int64_t pad = variant++ % 2 ? 3 : 0;
        test::check_gemm(panels_as_gemm, linalg::sgemm_ref, false, true, M, N, K, 1.0f, 0.0f, pad, rng);
        if (HasFatalFailure()) return;
      }
}

// Each element is one fused multiply-add chain from 0 in order of k, then
// + bias: the same bits from any thread count, for any M and N around it.
TEST_P(GemmPanels, OneFmaChainAnElementForAnyThreadCount) {
  std::mt19937 rng(62);
  const int64_t M = 19, N = 150, K = 77, lda = K + 2, ldc = N + 1;
  const VecF A = random_vec(rng, M * lda), B = random_vec(rng, N * K), bias = random_vec(rng, N);
  const VecF P = pack(B.data(), K, N, K);
  VecF want(static_cast<size_t>(M * ldc), 0.0f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s = std::fma(A[i * lda + k], B[j * K + k], s);
      want[i * ldc + j] = s + bias[j];
    }
  const int before = omp_get_max_threads();
  for (int threads : {1, 2, 3, 7}) {
    omp_set_num_threads(threads);
    VecF got(want.size(), 0.0f);
    linalg::sgemm_panels(M, N, K, A.data(), lda, P.data(), bias.data(), got.data(), ldc);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << threads << " threads";
    // Fewer rows: the same bits for the rows computed.
    VecF few(want.size(), 0.0f);
    linalg::sgemm_panels(3, N, K, A.data() + 5 * lda, lda, P.data(), bias.data(), few.data(), ldc);
    EXPECT_EQ(std::memcmp(few.data(), want.data() + 5 * ldc, 3 * ldc * sizeof(float)), 0) << threads << " threads";
  }
  omp_set_num_threads(before);
}

TEST_P(GemmPanels, BadSizesAreErrors) {
  const VecF x(64, 1.0f);
  float c[4];
  EXPECT_THROW(linalg::sgemm_panels(-1, 1, 1, x.data(), 1, x.data(), nullptr, c, 1), Error);
  EXPECT_THROW(linalg::sgemm_panels(1, 2, 3, x.data(), 2, x.data(), nullptr, c, 2), Error);  // lda < K
  EXPECT_THROW(linalg::sgemm_panels(1, 2, 3, x.data(), 3, x.data(), nullptr, c, 1), Error);  // ldc < N
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmPanels, ::testing::ValuesIn(all_isas()), test::isa_test_name);

}  // namespace
