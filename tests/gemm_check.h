// gemm_check.h: one GEMM against its plain-loop reference (sgemm against
// sgemm_ref in test_nn.cpp, gemm_bf16 against gemm_bf16_ref in
// test_gemm_bf16.cpp), on random operands with padded leading dimensions.
//
// Rule: per element, the worst-case rounding error of any summation order
// (FMA or not) of the products the reference forms is
// (K + 2) · 2^-24 · (|alpha| Σ_k |a_ik b_kj| + |beta c_ij|), the magnitudes
// taken through the reference itself (so for gemm_bf16 they are of the
// bf16-rounded operands); the check allows twice that, so it holds for any
// correct backend and fails on any wrong product or rounding. beta = 0 runs
// over a C of NaN (it must not be read), and the padding between C's rows
// must come back untouched.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace qkv::test {

// n floats drawn uniformly from [-1, 1).
inline std::vector<float> random_floats(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

using GemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);

inline void check_gemm(GemmFn gemm, GemmFn ref, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       float alpha, float beta, int64_t pad, std::mt19937& rng) {
  SCOPED_TRACE(std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " M " + std::to_string(M) +
               " N " + std::to_string(N) + " K " + std::to_string(K) + " alpha " +
               std::to_string(alpha) + " beta " + std::to_string(beta) + " pad " +
               std::to_string(pad));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(std::max<int64_t>(1, n)));
    for (float& x : v) x = u(rng);
    return v;
  };
  auto absolute = [](const std::vector<float>& v) {
    std::vector<float> a(v.size());
    std::transform(v.begin(), v.end(), a.begin(),
                   [](float x) { return std::isnan(x) ? 0.0f : std::abs(x); });
    return a;
  };
  // As in BLAS, a leading dimension is at least 1 even for an empty matrix.
  auto ld = [pad](int64_t cols) { return std::max<int64_t>(1, cols) + pad; };
  const int64_t lda = ld(ta ? M : K), ldb = ld(tb ? K : N), ldc = ld(N);
  const std::vector<float> A = random((ta ? K : M) * lda), B = random((tb ? N : K) * ldb);
  std::vector<float> C0 = random(M * ldc);
  if (beta == 0.0f) std::fill(C0.begin(), C0.end(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> got = C0, want = C0, bound = absolute(C0);
  gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
  ref(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
  ref(ta, tb, M, N, K, std::abs(alpha), absolute(A).data(), lda, absolute(B).data(), ldb,
      std::abs(beta), bound.data(), ldc);
  const double unit = (K + 2) * std::ldexp(1.0, -24);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const int64_t x = i * ldc + j;
      ASSERT_NEAR(got[x], want[x], 2.0 * unit * bound[x] + 1e-30) << "C[" << i << ", " << j << "]";
    }
    for (int64_t j = N; j < ldc && i * ldc + j < static_cast<int64_t>(got.size()); ++j) {
      const int64_t x = i * ldc + j;
      ASSERT_EQ(std::memcmp(&got[x], &C0[x], sizeof(float)), 0) << "padding C[" << i << ", " << j << "]";
    }
  }
}

}  // namespace qkv::test
