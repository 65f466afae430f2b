// The dot-product GEMM for few rows (core/gemm_dot_kernels.h): sgemm with
// op(A) = A, op(B) = Bᵀ and M <= kDotRowsMax, which takes it from avx512
// up, against sgemm_ref on every ISA path (the paths below avx512 run
// oneDNN on the same cases), and the bf16 kernel against gemm_bf16_ref on
// the paths that have it (gemm_bf16 itself on few rows: test_gemm_bf16.cpp's
// cases with M <= 13, and the thread counts here). Sizes around the kernels' blocks (4 rows of A, 6
// rows of B, 16 float32 or 32 bf16 k a vector, 48 columns a thread's
// share); the rule is gemm_check.h's. And the same for B stored [K, N].
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <initializer_list>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/isa_kernels.h"
#include "gemm_check.h"
#include "isa_fixture.h"
#include "linalg/gemm.h"
#include "qkv/tensor.h"

using namespace qkv;
using kernels::kDotRowsMax;
using linalg::sgemm;
using linalg::sgemm_ref;

namespace {

using VecF = std::vector<float>;

VecF random_vec(std::mt19937& rng, int64_t n) { return test::random_floats(rng, n); }

const kernels::GemmDotKernels* dot_kernels() { return isa_kernels(active_isa()).gemm_dot; }

// The bf16 kernel as a GemmFn for check_gemm: A [M, K] and B [N, K] rounded
// to bf16 bit patterns (to nearest even) and handed to it.
void dot_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  EXPECT_FALSE(ta);
  EXPECT_TRUE(tb);
  auto bits = [](const float* x, int64_t n) {
    std::vector<uint16_t> b(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) b[i] = bf16_from_float(x[i]).bits;
    return b;
  };
  const std::vector<uint16_t> a = bits(A, M * lda), b = bits(B, N * ldb);
  dot_kernels()->bf16(M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, nullptr, C, ldc);
}

class GemmDot : public test::OnIsa {};

TEST_P(GemmDot, SgemmOnFewRowsMatchesReference) {
  std::mt19937 rng(51);
  const float alphas[] = {1.0f, 0.5f, -1.5f}, betas[] = {0.0f, 1.0f, 0.25f};
  int variant = 0;
  for (int64_t M : std::initializer_list<int64_t>{1, 3, 4, 5, 16, kDotRowsMax})
    for (int64_t N : {1, 5, 6, 7, 47, 49, 100})
      for (int64_t K : {1, 15, 16, 17, 33, 100}) {
        const float alpha = alphas[variant % 3], beta = betas[(variant / 3) % 3];
        const int64_t pad = (variant / 9) % 2 ? 3 : 0;
        ++variant;
        test::check_gemm(sgemm, sgemm_ref, false, true, M, N, K, alpha, beta, pad, rng);
        if (HasFatalFailure()) return;
      }
}

// Each element's bits depend on K and its operands alone: the same for any
// thread count and any columns around it, and from 2 rows up for rows
// computed in pairs (another block shape and share of the columns) as among
// 16 or 32. One row (a decoded token) has its own order (four chains of
// vectors), the same for any thread count and any columns around it.
TEST_P(GemmDot, SameBitsForAnyThreadCountAndAnyRowsAround) {
  std::mt19937 rng(52);
  const int64_t N = 150, K = 391;
  const VecF A = random_vec(rng, kDotRowsMax * K), B = random_vec(rng, N * K);
  const int saved = omp_get_max_threads();
  for (int64_t M : std::initializer_list<int64_t>{1, 16, kDotRowsMax}) {
    VecF first;
    for (int threads : {1, 2, 3, 8}) {
      omp_set_num_threads(threads);
      VecF C(M * N);
      sgemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
      if (first.empty()) first = C;
      else EXPECT_EQ(std::memcmp(C.data(), first.data(), C.size() * sizeof(float)), 0)
               << "M " << M << ", " << threads << " threads";
    }
    if (!dot_kernels()) continue;  // oneDNN's blocking is its own
    omp_set_num_threads(2);
    const int64_t j0 = 5, n = 7;  // a few columns alone
    VecF part(M * n);
    sgemm(false, true, M, n, K, 1.0f, A.data(), K, B.data() + j0 * K, K, 0.0f, part.data(), n);
    for (int64_t i = 0; i < M; ++i)
      ASSERT_EQ(std::memcmp(part.data() + i * n, first.data() + i * N + j0, n * sizeof(float)), 0)
          << "M " << M << ", row " << i << " of columns " << j0 << ".." << j0 + n;
    for (int64_t i = 0; M > 1 && i + 1 < M; i += 2) {
      VecF pair(2 * N);
      sgemm(false, true, 2, N, K, 1.0f, A.data() + i * K, K, B.data(), K, 0.0f, pair.data(), N);
      ASSERT_EQ(std::memcmp(pair.data(), first.data() + i * N, 2 * N * sizeof(float)), 0)
          << "rows " << i << ", " << i + 1 << " of " << M;
    }
  }
  omp_set_num_threads(saved);
}

// One row of A (a decoded token) against weight rows lying at every offset
// from a 64-byte line, as a checkpoint's tensors do: the same bits as the
// rows aligned, with NaN all around them that no sum may read. float32
// through sgemm, bf16 through its kernel.
TEST_P(GemmDot, OneRowSameBitsWhereverTheWeightLies) {
  std::mt19937 rng(56);
  const int64_t N = 3;
  for (int64_t K : {1, 15, 16, 17, 31, 32, 33, 64, 65, 100, 257}) {
    const VecF A = random_vec(rng, K), B = random_vec(rng, N * K);
    // Room for the rows at any offset, NaN around them, 64-byte aligned.
    auto placed = [&](auto value, int64_t elem, int64_t off) {
      using T = decltype(value);
      const size_t n = static_cast<size_t>(N * K + 2 * 64 / elem + off);
      std::vector<T> room(n + 64 / elem);
      T* at = room.data();
      while (reinterpret_cast<uintptr_t>(at) % 64) ++at;
      std::fill(room.begin(), room.end(), value);
      for (int64_t x = 0; x < N * K; ++x) {
        if constexpr (std::is_same_v<T, float>) at[64 / elem + off + x] = B[x];
        else at[64 / elem + off + x] = bf16_from_float(B[x]).bits;
      }
      return std::make_pair(std::move(room), static_cast<size_t>(at - room.data()) + 64 / elem + off);
    };
    VecF first(N), got(N);
    for (int64_t off = 0; off < 16; ++off) {
      const auto [room, at] = placed(std::numeric_limits<float>::quiet_NaN(), 4, off);
      sgemm(false, true, 1, N, K, 1.0f, A.data(), K, room.data() + at, K, 0.0f, got.data(), N);
      if (off == 0) first = got;
      ASSERT_EQ(std::memcmp(got.data(), first.data(), N * sizeof(float)), 0) << "float32, K " << K << ", offset " << off;
    }
    if (!dot_kernels() || !dot_kernels()->bf16) continue;
    std::vector<uint16_t> a16(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) a16[k] = bf16_from_float(A[k]).bits;
    for (int64_t off = 0; off < 32; ++off) {
      const auto [room, at] = placed(uint16_t{0x7FC0}, 2, off);  // bf16 NaN
      dot_kernels()->bf16(1, N, K, 1.0f, a16.data(), K, room.data() + at, K, 0.0f, nullptr, got.data(), N);
      if (off == 0) first = got;
      ASSERT_EQ(std::memcmp(got.data(), first.data(), N * sizeof(float)), 0) << "bf16, K " << K << ", offset " << off;
      for (float x : got) ASSERT_FALSE(std::isnan(x)) << "bf16, K " << K << ", offset " << off;
    }
  }
}

// The same rows right against inaccessible pages, ending up to 64 bytes
// before the next page or starting up to 64 bytes into their own: a load
// of a line past either end of a row faults. Bits as from the row's copy
// elsewhere.
TEST_P(GemmDot, OneRowReadsNothingPastItsEnds) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* guarded = static_cast<char*>(mmap(nullptr, 3 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(guarded, MAP_FAILED);
  char* room = guarded + page;  // [room, room + page) readable, its neighbours not
  ASSERT_EQ(mprotect(room, page, PROT_READ | PROT_WRITE), 0);
  std::mt19937 rng(57);
  for (int64_t K : {1, 16, 17, 33, 100, 257}) {
    const VecF A = random_vec(rng, K), B = random_vec(rng, K);
    std::vector<uint16_t> a16(static_cast<size_t>(K)), b16(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) a16[k] = bf16_from_float(A[k]).bits, b16[k] = bf16_from_float(B[k]).bits;
    float want = 0.0f, want16 = 0.0f, got = 0.0f;
    sgemm(false, true, 1, 1, K, 1.0f, A.data(), K, B.data(), K, 0.0f, &want, 1);
    const bool has16 = dot_kernels() && dot_kernels()->bf16;
    if (has16) dot_kernels()->bf16(1, 1, K, 1.0f, a16.data(), K, b16.data(), K, 0.0f, nullptr, &want16, 1);
    for (size_t d = 0; d < 64; d += 2) {
      for (char* at : {room + d, room + page - d - 4 * K}) {  // float32: d a multiple of 4 only
        if (d % 4) continue;
        std::memcpy(at, B.data(), 4 * K);
        sgemm(false, true, 1, 1, K, 1.0f, A.data(), K, reinterpret_cast<const float*>(at), K, 0.0f, &got, 1);
        ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0) << "float32, K " << K << ", " << d << " bytes";
      }
      if (!has16) continue;
      for (char* at : {room + d, room + page - d - 2 * K}) {
        std::memcpy(at, b16.data(), 2 * K);
        dot_kernels()->bf16(1, 1, K, 1.0f, a16.data(), K, reinterpret_cast<const uint16_t*>(at), K, 0.0f, nullptr, &got, 1);
        ASSERT_EQ(std::memcmp(&got, &want16, sizeof(float)), 0) << "bf16, K " << K << ", " << d << " bytes";
      }
    }
  }
  munmap(guarded, 3 * page);
}

// gemm_bf16 on few rows (the dot-product path from avx512bf16 up): the
// same bits for any thread count, with the weight in float32 or bf16.
TEST_P(GemmDot, GemmBf16OnFewRowsSameBitsForAnyThreadCount) {
  std::mt19937 rng(55);
  const int64_t M = 16, N = 150, K = 391;
  const VecF A = random_vec(rng, M * K), B = random_vec(rng, N * K), bias = random_vec(rng, N);
  std::vector<bfloat16> B16(B.size());
  for (size_t i = 0; i < B.size(); ++i) B16[i] = bf16_from_float(B[i]);
  const int saved = omp_get_max_threads();
  VecF first;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    VecF C(M * N), C16(M * N);
    linalg::gemm_bf16_bias(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f,
                            bias.data(), C.data(), N);
    linalg::gemm_bf16_bias(false, true, M, N, K, 1.0f, A.data(), K, B16.data(), K, 0.0f,
                            bias.data(), C16.data(), N);
    EXPECT_EQ(std::memcmp(C.data(), C16.data(), C.size() * sizeof(float)), 0) << threads;
    if (first.empty()) first = C;
    else EXPECT_EQ(std::memcmp(C.data(), first.data(), C.size() * sizeof(float)), 0)
             << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST_P(GemmDot, Bf16KernelMatchesReference) {
  if (!dot_kernels() || !dot_kernels()->bf16) GTEST_SKIP() << "no bf16 dot kernel on this path";
  std::mt19937 rng(53);
  int variant = 0;
  for (int64_t M : std::initializer_list<int64_t>{1, 4, 5, 16, kDotRowsMax})
    for (int64_t N : {1, 6, 7, 49})
      for (int64_t K : {1, 2, 31, 32, 33, 65, 384}) {
        const float alpha = variant % 2 ? 0.5f : 1.0f, beta = variant % 3 ? 0.0f : 0.25f;
        ++variant;
        test::check_gemm(dot_bf16, linalg::gemm_bf16_ref, false, true, M, N, K, alpha, beta,
                         variant % 2, rng);
        if (HasFatalFailure()) return;
      }
}

// B stored [K, N] (op(B) = B, GPT-2's Conv1D weights as their files hold
// them): sgemm and gemm_bf16 on few rows take the [K, N] kernels from avx512
// (bf16: avx512bf16) up. Sizes around their blocks: 16 float32 or 32 bf16
// columns a unit, 4 (bf16: 2) units a block of 4 rows, 8 (4) units for one
// row, 32 columns a thread's share, pairs of k for bf16.
TEST_P(GemmDot, WeightStoredKByNMatchesReference) {
  std::mt19937 rng(56);
  int variant = 0;
  for (int64_t M : std::initializer_list<int64_t>{1, 2, 3, 4, 5, 16, kDotRowsMax})
    for (int64_t N : {1, 15, 16, 33, 64, 127, 129, 300})
      for (int64_t K : {1, 2, 17, 64, 101}) {
        const float alpha = variant % 2 ? 0.5f : 1.0f, beta = variant % 3 ? 0.0f : 0.25f;
        const int64_t pad = variant % 4 == 3 ? 5 : 0;
        ++variant;
        test::check_gemm(sgemm, sgemm_ref, false, false, M, N, K, alpha, beta, pad, rng);
        test::check_gemm(static_cast<test::GemmFn>(linalg::gemm_bf16), linalg::gemm_bf16_ref, false, false, M, N,
                         K, alpha, beta,
                         pad, rng);
        if (HasFatalFailure()) return;
      }
}

// Each element of C against B [K, N] is one lane's sum in order of k: the
// same bits for any thread count, any columns around it and any rows, with
// a bf16 weight in float32 or bf16, and the bias after the sum.
TEST_P(GemmDot, WeightStoredKByNSameBitsForAnyThreadCountColumnsAndRows) {
  std::mt19937 rng(57);
  const int64_t N = 301, K = 391;
  const VecF A = random_vec(rng, kDotRowsMax * K), B = random_vec(rng, K * N), bias = random_vec(rng, N);
  std::vector<bfloat16> B16(B.size());
  for (size_t i = 0; i < B.size(); ++i) B16[i] = bf16_from_float(B[i]);
  const int saved = omp_get_max_threads();
  for (bool bf16 : {false, true}) {
    auto gemm = [&](int64_t M, int64_t n, int64_t j0, int64_t row, const float* b, VecF& C) {
      if (bf16)
        linalg::gemm_bf16_bias(false, false, M, n, K, 1.0f, A.data() + row * K, K, B16.data() + j0, N, 0.0f,
                                b, C.data(), n);
      else
        linalg::sgemm_bias(false, false, M, n, K, 1.0f, A.data() + row * K, K, B.data() + j0, N, 0.0f, b,
                            C.data(), n);
    };
    VecF first;
    for (int threads : {1, 2, 3, 8}) {
      omp_set_num_threads(threads);
      VecF C(kDotRowsMax * N);
      gemm(kDotRowsMax, N, 0, 0, bias.data(), C);
      if (first.empty()) first = C;
      else ASSERT_EQ(std::memcmp(C.data(), first.data(), C.size() * sizeof(float)), 0)
               << (bf16 ? "bf16, " : "float32, ") << threads << " threads";
    }
    omp_set_num_threads(2);
    if (bf16) {  // the float32 weight, rounded as the kernel reads it: the same bits
      VecF C(kDotRowsMax * N);
      linalg::gemm_bf16_bias(false, false, kDotRowsMax, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                              bias.data(), C.data(), N);
      EXPECT_EQ(std::memcmp(C.data(), first.data(), C.size() * sizeof(float)), 0);
    }
    const kernels::GemmDotKernels* dot = dot_kernels();
    const bool kernel = dot && (bf16 ? dot->bf16_kn != nullptr : dot->f32_kn != nullptr);
    if (!kernel) continue;  // oneDNN's blocking is its own
    for (int64_t M : {1, 2, 5}) {
      const int64_t row = 3, j0 = 37, n = 70;  // a few rows and columns alone
      VecF part(M * n), plain(M * n);
      gemm(M, n, j0, row, bias.data() + j0, part);
      for (int64_t i = 0; i < M; ++i)
        ASSERT_EQ(std::memcmp(part.data() + i * n, first.data() + (row + i) * N + j0, n * sizeof(float)), 0)
            << (bf16 ? "bf16, " : "float32, ") << M << " rows";
      gemm(M, n, j0, row, nullptr, plain);
      for (int64_t x = 0; x < M * n; ++x) ASSERT_EQ(part[x], plain[x] + bias[j0 + x % n]) << x;
    }
  }
  omp_set_num_threads(saved);
}

// The bias lands after the rounded sum, as gemm_bf16_bias adds it: the bits
// of the sum with the bias in C and beta = 1.
TEST_P(GemmDot, Bf16KernelAddsTheBiasAfterTheSum) {
  if (!dot_kernels() || !dot_kernels()->bf16) GTEST_SKIP() << "no bf16 dot kernel on this path";
  std::mt19937 rng(54);
  const int64_t M = 7, N = 13, K = 45;
  const VecF A = random_vec(rng, M * K), B = random_vec(rng, N * K), bias = random_vec(rng, N);
  std::vector<uint16_t> a(A.size()), b(B.size());
  for (size_t i = 0; i < A.size(); ++i) a[i] = bf16_from_float(A[i]).bits;
  for (size_t i = 0; i < B.size(); ++i) b[i] = bf16_from_float(B[i]).bits;
  VecF got(M * N), want(M * N);
  for (int64_t i = 0; i < M; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * N);
  dot_kernels()->bf16(M, N, K, 0.5f, a.data(), K, b.data(), K, 0.0f, bias.data(), got.data(), N);
  dot_kernels()->bf16(M, N, K, 0.5f, a.data(), K, b.data(), K, 1.0f, nullptr, want.data(), N);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// sgemm_bias with beta = 0 gives the bits of the bias in C and beta = 1 (C
// starts NaN: never read), on the dot-product kernels (few rows, from
// avx512 up) and on oneDNN (many rows, op(B) = B, below avx512); with beta
// = 0.5, those of the GEMM without bias, then the bias added.
TEST_P(GemmDot, SgemmBiasIsBitwiseTheBiasInCWithBetaOne) {
  std::mt19937 rng(55);
  for (bool tb : {false, true})
    for (auto [M, N, K] : {std::array<int64_t, 3>{1, 150, 391}, {16, 47, 100}, {kDotRowsMax, 7, 33},
                           {100, 130, 77}, {1, 1, 0}}) {
      SCOPED_TRACE((tb ? "NT M " : "NN M ") + std::to_string(M) + " N " + std::to_string(N) +
                   " K " + std::to_string(K));
      const VecF A = random_vec(rng, M * K), B = random_vec(rng, K * N), bias = random_vec(rng, N);
      const VecF C0 = random_vec(rng, M * N);
      const int64_t ldb = tb ? std::max<int64_t>(K, 1) : N, lda = std::max<int64_t>(K, 1);
      VecF got(M * N, std::numeric_limits<float>::quiet_NaN()), want(M * N);
      for (int64_t i = 0; i < M; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * N);
      linalg::sgemm_bias(false, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.0f, bias.data(),
                          got.data(), N);
      sgemm(false, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, want.data(), N);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      VecF got_b = C0, want_b = C0;
      linalg::sgemm_bias(false, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.5f, bias.data(),
                          got_b.data(), N);
      sgemm(false, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.5f, want_b.data(), N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) want_b[i * N + j] += bias[j];
      ASSERT_EQ(std::memcmp(got_b.data(), want_b.data(), got_b.size() * sizeof(float)), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmDot, ::testing::ValuesIn(all_isas()), test::isa_test_name);

}  // namespace
