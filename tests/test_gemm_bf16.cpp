// gemm_bf16 (linalg/gemm.h): the mixed-precision GEMM against gemm_bf16_ref,
// on every ISA path this CPU has (the AVX512-BF16 micro-kernel, and the
// widening path every other CPU takes).
//
// Rule: per element, the float32 sum of the rounded products may differ from
// the float64 sum of the same products by the worst-case rounding error of
// any summation order, (K + 2) · 2^-24 · (|alpha| Σ_k |a'_ik b'_kj| + |beta c_ij|)
// with a', b' the bf16-rounded operands; the check allows twice that. Not
// rounding an operand, or rounding it the wrong way, moves a result by about
// 2^-9 of that sum, far outside the rule for every K here.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/isa_kernels.h"
#include "gemm_check.h"
#include "isa_fixture.h"
#include "linalg/gemm.h"
#include "qkv/error.h"
#include "qkv/tensor.h"

using namespace qkv;
using linalg::gemm_bf16;
using linalg::gemm_bf16_bias;
using linalg::gemm_bf16_ref;

namespace {

using VecF = std::vector<float>;

// The vdpbf16ps packings of `isa`'s table, called directly.
const kernels::bf16gemm::PairGemmKernels& pairs_of(Isa isa) {
  return *kernels::isa_kernels(isa).gemm_pairs;
}

VecF random_vec(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  VecF v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// x's elements as bf16 bit patterns, rounded to nearest even: the packings'
// bf16 sources, and the halves their float32 sources must round to.
std::vector<uint16_t> bf16_bits(const VecF& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = bf16_from_float(x[i]).bits;
  return b;
}

// A pair word: lo in the low half, hi (0 past an odd K) in the high half.
uint32_t pair_of(uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; }

// The rule (module comment) and the cases' set-up: gemm_check.h.
void check(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int64_t pad,
           std::mt19937& rng) {
  test::check_gemm(gemm_bf16, gemm_bf16_ref, ta, tb, M, N, K, alpha, beta, pad, rng);
}

class GemmBf16 : public test::OnIsa {};

TEST_P(GemmBf16, MatchesReferenceOnOddSizesAndEveryTranspose) {
  std::mt19937 rng(31);
  // Around the micro-tile's edges: 6 rows, 64 columns, pairs of K.
  const int64_t sizes[] = {1, 2, 5, 7, 13, 63, 65, 130};
  const float alphas[] = {1.0f, 0.5f, -1.5f};
  const float betas[] = {0.0f, 1.0f, 0.25f};
  int variant = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : sizes)
        for (int64_t N : sizes)
          for (int64_t K : {1, 2, 3, 31, 32, 33, 129}) {
            if ((M + N + K + variant) % 3 != 0) {  // a third of the cases, every pair of sizes met
              ++variant;
              continue;
            }
            const float alpha = alphas[variant % 3], beta = betas[(variant / 3) % 3];
            const int64_t pad = (variant / 9) % 2 ? 3 : 0;
            ++variant;
            check(ta, tb, M, N, K, alpha, beta, pad, rng);
            if (HasFatalFailure()) return;
          }
}

TEST_P(GemmBf16, ModelShapes) {
  std::mt19937 rng(32);
  // The GPT's linear layers at B·T = 768: forward, input and weight gradients.
  for (auto [C, OC] : {std::pair<int64_t, int64_t>{128, 384}, {512, 128}, {128, 65}}) {
    check(false, true, 768, OC, C, 1.0f, 0.0f, 0, rng);
    check(false, false, 768, C, OC, 1.0f, 1.0f, 0, rng);
    check(true, false, OC, C, 768, 1.0f, 1.0f, 0, rng);
  }
  // A real model's weight, larger than the column chunk that every row
  // block meets before the next (512 KB of pairs: 2 panels of 64 columns at
  // K = 2048); 5 panels make 3 chunks, the last one short, at rows that are
  // no multiple of the 6-row tile.
  check(false, true, 100, 300, 2048, 1.0f, 0.0f, 0, rng);
  check(false, true, 13, 320, 2047, 0.5f, 1.0f, 3, rng);
}

TEST_P(GemmBf16, RoundsItsOperandsToNearestEven) {
  // 1 + 2^-8 lies halfway between the bf16 values 1 and 1 + 2^-7: it rounds
  // to 1 (even). 1 + 3·2^-8 rounds up to 1 + 2^-6. Products with 1.
  const float A[2] = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)};
  const float one[1] = {1.0f};
  float C[2] = {0.0f, 0.0f};
  gemm_bf16(false, false, 2, 1, 1, 1.0f, A, 1, one, 1, 0.0f, C, 1);
  EXPECT_EQ(C[0], 1.0f);
  EXPECT_EQ(C[1], 1.0f + std::ldexp(1.0f, -6));
}

TEST_P(GemmBf16, NanAndInfPropagate) {
  // A NaN or an Inf in op(A)'s row i reaches row i of C, and only it, with
  // op(A) = A and op(A) = Aᵀ (A stored [K][M]; its pairs are packed across
  // A's rows).
  std::mt19937 rng(33);
  const int64_t M = 9, N = 70, K = 37;
  for (bool ta : {false, true}) {
    SCOPED_TRACE(ta ? "op(A) = A^T" : "op(A) = A");
    VecF A = random_vec(rng, M * K), B = random_vec(rng, K * N), C(M * N, 0.0f);
    auto at = [&](int64_t i, int64_t k) -> float& { return ta ? A[k * M + i] : A[i * K + k]; };
    at(2, 5) = std::numeric_limits<float>::quiet_NaN();
    at(7, 36) = std::numeric_limits<float>::infinity();
    B.assign(B.size(), 0.5f);
    gemm_bf16(ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, 0.0f, C.data(), N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float c = C[i * N + j];
        if (i == 2) ASSERT_TRUE(std::isnan(c)) << i << "," << j;
        else if (i == 7) ASSERT_EQ(c, std::numeric_limits<float>::infinity()) << i << "," << j;
        else ASSERT_TRUE(std::isfinite(c)) << i << "," << j;
      }
  }
}

TEST_P(GemmBf16, BiasIsBitwiseTheBiasInCWithBetaOne) {
  // C = alpha · op(A) · op(B) + bias with beta = 0 (C starts NaN: never
  // read) against the bias copied into C and beta = 1, bit for bit; and
  // with beta = 0.5, against the same GEMM without bias plus the bias.
  std::mt19937 rng(35);
  for (bool tb : {false, true})
    for (auto [M, N, K] : {std::array<int64_t, 3>{768, 384, 128}, {13, 65, 33}, {7, 130, 1}, {1, 1, 5}}) {
      SCOPED_TRACE((tb ? "NT M " : "NN M ") + std::to_string(M) + " N " + std::to_string(N) +
                   " K " + std::to_string(K));
      const VecF A = random_vec(rng, M * K), B = random_vec(rng, K * N), bias = random_vec(rng, N);
      const VecF C0 = random_vec(rng, M * N);
      const int64_t ldb = tb ? K : N;
      VecF got(M * N, std::numeric_limits<float>::quiet_NaN()), want(M * N);
      for (int64_t i = 0; i < M; ++i) std::copy(bias.begin(), bias.end(), want.begin() + i * N);
      gemm_bf16_bias(false, tb, M, N, K, 0.5f, A.data(), K, B.data(), ldb, 0.0f, bias.data(), got.data(), N);
      gemm_bf16(false, tb, M, N, K, 0.5f, A.data(), K, B.data(), ldb, 1.0f, want.data(), N);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      VecF got_b = C0, want_b = C0;
      gemm_bf16_bias(false, tb, M, N, K, 1.0f, A.data(), K, B.data(), ldb, 0.5f, bias.data(), got_b.data(), N);
      gemm_bf16(false, tb, M, N, K, 1.0f, A.data(), K, B.data(), ldb, 0.5f, want_b.data(), N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) want_b[i * N + j] += bias[j];
      ASSERT_EQ(std::memcmp(got_b.data(), want_b.data(), got_b.size() * sizeof(float)), 0);
    }
  // No products (K = 0): C = beta · C + bias.
  const float a[1] = {1.0f}, bias[2] = {0.25f, -1.0f};
  float c[2] = {2.0f, 4.0f};
  gemm_bf16_bias(false, false, 1, 2, 0, 1.0f, a, 1, a, 2, 0.5f, bias, c, 2);
  EXPECT_EQ(c[0], 1.25f);
  EXPECT_EQ(c[1], 1.0f);
}

TEST_P(GemmBf16, SameBitsForAnyThreadCount) {
  std::mt19937 rng(34);
  const int64_t M = 100, N = 130, K = 77;
  const VecF A = random_vec(rng, K * M), B = random_vec(rng, N * K), C0 = random_vec(rng, M * N);
  const int saved = omp_get_max_threads();
  VecF first;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    VecF C = C0;
    gemm_bf16(true, true, M, N, K, 1.0f, A.data(), M, B.data(), K, 1.0f, C.data(), N);
    if (first.empty()) first = C;
    else EXPECT_EQ(std::memcmp(C.data(), first.data(), C.size() * sizeof(float)), 0) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

// A panel of op(B) = Bᵀ packed past the weight's last row (gemm_bf16 packs
// whole panels of 64 columns, N = 20 here): the blocks of 16 rows wholly
// past W are zeros, read from nowhere (a sanitizer run checks the latter).
TEST(GemmBf16Packing, GatherPairsPastTheLastRowStoresZeros) {
  if (detected_isa() < Isa::avx512bf16) GTEST_SKIP() << "AVX512-BF16 not on this CPU";
  std::mt19937 rng(36);
  const int64_t W = 20, K = 37, ld = K, np = kernels::bf16gemm::pairs(K), dst_ld = 64;
  const VecF src = random_vec(rng, W * ld);
  const std::vector<uint16_t> src16 = bf16_bits(src);
  std::vector<uint32_t> got(np * dst_ld, 0xdeadbeefu), got16 = got;
  pairs_of(Isa::avx512bf16).from_f32.gather_pairs(src.data(), ld, W, K, 0, dst_ld, got.data(), dst_ld);
  pairs_of(Isa::avx512bf16).from_bf16.gather_pairs(src16.data(), ld, W, K, 0, dst_ld, got16.data(), dst_ld);
  for (int64_t p = 0; p < np; ++p)
    for (int64_t w = 0; w < dst_ld; ++w) {
      const uint32_t want = w < W ? pair_of(src16[w * ld + 2 * p], 2 * p + 1 < K ? src16[w * ld + 2 * p + 1] : 0) : 0u;
      ASSERT_EQ(got[p * dst_ld + w], want) << "pair " << p << " row " << w;
      ASSERT_EQ(got16[p * dst_ld + w], want) << "bf16 source, pair " << p << " row " << w;
    }
}

// A long K with op(B) = Bᵀ (a Linear's weight) is summed in slices, each
// panel's slice packed in turn, when beta = 0: the same bits as one sum
// over the whole K, which beta = 1 runs (the bias in C); for any thread count
// (which changes how the row blocks are shared when panels are few); and
// within the reference's bound. K odd, three slices, columns short of a
// panel, rows past the dot-product kernels', B in float32 and in bfloat16.
TEST_P(GemmBf16, LongKInSlicesGivesTheBitsOfOneSum) {
  std::mt19937 rng(37);
  const int64_t M = 40, K = 4099;
  const int saved = omp_get_max_threads();
  for (int64_t N : {30, 130}) {
    SCOPED_TRACE("N " + std::to_string(N));
    const VecF A = random_vec(rng, M * K), B = random_vec(rng, N * K), bias = random_vec(rng, N);
    std::vector<bfloat16> B16(B.size());
    for (size_t i = 0; i < B.size(); ++i) B16[i] = bf16_from_float(B[i]);
    VecF one_sum(M * N);  // the bias in C, beta = 1: what the bias gives (BiasIsBitwise... above)
    for (int64_t i = 0; i < M; ++i) std::copy(bias.begin(), bias.end(), one_sum.begin() + i * N);
    gemm_bf16(false, true, M, N, K, 0.5f, A.data(), K, B.data(), K, 1.0f, one_sum.data(), N);
    for (int threads : {1, 2, 3, 8}) {
      omp_set_num_threads(threads);
      VecF got(M * N, std::numeric_limits<float>::quiet_NaN()), got16 = got;
      gemm_bf16_bias(false, true, M, N, K, 0.5f, A.data(), K, B.data(), K, 0.0f, bias.data(),
                     got.data(), N);
      gemm_bf16_bias(false, true, M, N, K, 0.5f, A.data(), K, B16.data(), K, 0.0f, bias.data(),
                     got16.data(), N);
      EXPECT_EQ(std::memcmp(got.data(), one_sum.data(), got.size() * sizeof(float)), 0) << threads << " threads";
      EXPECT_EQ(std::memcmp(got16.data(), one_sum.data(), got.size() * sizeof(float)), 0)
          << "bf16 B, " << threads << " threads";
    }
    omp_set_num_threads(saved);
    check(false, true, M, N, K, 1.0f, 0.0f, 3, rng);
  }
}

// An operand given in bfloat16 gives the bits of passing the float32
// values it was rounded from (which gemm_bf16 rounds the same way): every
// transpose, K and leading dimensions even and odd (op(A) = A in place only
// for both even), beta 0 (C starts NaN: never read) and 1, with and without
// bias. On every ISA path. M = 13, 7 and 20 with op(B) = Bᵀ take the
// dot-product path on AVX512-BF16, 768 the packed tiles.
TEST_P(GemmBf16, Bf16OperandsGiveTheBitsOfTheirFloat32Values) {
  std::mt19937 rng(36);
  auto rounded = [](const VecF& x) {
    std::vector<bfloat16> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_from_float(x[i]);
    return r;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] :
           {std::array<int64_t, 3>{13, 70, 32}, {7, 65, 33}, {20, 3, 130}, {768, 128, 128}})
        for (int64_t pad : {0, 1}) {
          SCOPED_TRACE(std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " M " + std::to_string(M) +
                       " N " + std::to_string(N) + " K " + std::to_string(K) + " pad " + std::to_string(pad));
          const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
          const VecF A = random_vec(rng, (ta ? K : M) * lda), B = random_vec(rng, (tb ? N : K) * ldb);
          const VecF bias = random_vec(rng, N), C0 = random_vec(rng, M * N);
          const std::vector<bfloat16> A16 = rounded(A), B16 = rounded(B);
          for (float beta : {0.0f, 1.0f}) {
            const VecF start = beta == 0.0f ? VecF(M * N, nan) : C0;
            VecF want = start, got_a = start, got_b = start;
            gemm_bf16(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, want.data(), N);
            gemm_bf16(ta, tb, M, N, K, 0.5f, A16.data(), lda, B.data(), ldb, beta, got_a.data(), N);
            gemm_bf16(ta, tb, M, N, K, 0.5f, A.data(), lda, B16.data(), ldb, beta, got_b.data(), N);
            ASSERT_EQ(std::memcmp(got_a.data(), want.data(), want.size() * sizeof(float)), 0);
            ASSERT_EQ(std::memcmp(got_b.data(), want.data(), want.size() * sizeof(float)), 0);
            VecF want_bias = start, got_bias = start;
            gemm_bf16_bias(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, beta, bias.data(),
                           want_bias.data(), N);
            gemm_bf16_bias(ta, tb, M, N, K, 1.0f, A16.data(), lda, B.data(), ldb, beta, bias.data(),
                           got_bias.data(), N);
            ASSERT_EQ(std::memcmp(got_bias.data(), want_bias.data(), want.size() * sizeof(float)), 0);
            // A weight kept in bf16 (B16), its input in either type.
            VecF got_bias_b = start, got_bias_ab = start;
            gemm_bf16_bias(ta, tb, M, N, K, 1.0f, A.data(), lda, B16.data(), ldb, beta, bias.data(),
                           got_bias_b.data(), N);
            gemm_bf16_bias(ta, tb, M, N, K, 1.0f, A16.data(), lda, B16.data(), ldb, beta,
                           bias.data(), got_bias_ab.data(), N);
            ASSERT_EQ(std::memcmp(got_bias_b.data(), want_bias.data(), want.size() * sizeof(float)), 0);
            ASSERT_EQ(std::memcmp(got_bias_ab.data(), want_bias.data(), want.size() * sizeof(float)), 0);
          }
        }
}

INSTANTIATE_TEST_SUITE_P(Isas, GemmBf16,
                         ::testing::ValuesIn(all_isas()),
                         test::isa_test_name);

TEST(GemmBf16Args, EmptySizesAndBadArguments) {
  float c[4] = {7.0f, 7.0f, 7.0f, 7.0f};
  const float a[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  gemm_bf16(false, false, 0, 1, 1, 1.0f, a, 1, a, 1, 0.0f, c, 1);  // M = 0: nothing touched
  EXPECT_EQ(c[0], 7.0f);
  gemm_bf16(false, false, 2, 2, 0, 1.0f, a, 1, a, 2, 0.5f, c, 2);  // K = 0: C = beta · C
  EXPECT_EQ(c[0], 3.5f);
  float x[16] = {};
  EXPECT_THROW(gemm_bf16(false, false, -1, 2, 2, 1.0f, x, 2, x, 2, 0.0f, x, 2), Error);
  EXPECT_THROW(gemm_bf16(false, false, 2, 2, 3, 1.0f, x, 2, x, 2, 0.0f, x, 2), Error);  // lda < K
  EXPECT_THROW(gemm_bf16(false, true, 2, 3, 2, 1.0f, x, 2, x, 1, 0.0f, x, 3), Error);   // ldb < K
  EXPECT_THROW(gemm_bf16(false, false, 2, 3, 2, 1.0f, x, 2, x, 3, 0.0f, x, 2), Error);  // ldc < N
  try {
    gemm_bf16(false, false, 2, 2, 3, 1.0f, x, 2, x, 2, 0.0f, x, 2);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_bf16: lda"), std::string::npos) << e.what();
  }
}

// The packing of op(A) = Aᵀ for AMX tiles, called directly (it runs on
// any AVX512-BF16 CPU; the GEMM calls it only on AMX): each row w of dst
// holds the pairs (src[2p][w], src[2p+1][w]) rounded to nearest even (bf16
// sources as they are), the high half 0 past an odd K, and nothing past
// pairs(K) is written. Widths around the 16 columns of one pass.
TEST(GemmBf16Packing, TransposePairsIsInterleaveRowsTransposed) {
  if (detected_isa() < Isa::avx512bf16) GTEST_SKIP() << "AVX512-BF16 not on this CPU";
  std::mt19937 rng(34);
  constexpr uint32_t kUntouched = 0xdeadbeefu;
  for (int64_t K : {1, 2, 31, 33})
    for (int64_t W : {1, 15, 16, 17, 40}) {
      SCOPED_TRACE(::testing::Message() << "K " << K << " W " << W);
      const int64_t ld = W + 3, np = kernels::bf16gemm::pairs(K), dst_ld = np + 2;
      const VecF src = random_vec(rng, K * ld);
      const std::vector<uint16_t> src16 = bf16_bits(src);
      std::vector<uint32_t> got(W * dst_ld, kUntouched), got16(W * dst_ld, kUntouched);
      pairs_of(Isa::avx512bf16).from_f32.transpose_pairs(src.data(), ld, K, W, got.data(), dst_ld);
      pairs_of(Isa::avx512bf16).from_bf16.transpose_pairs(src16.data(), ld, K, W, got16.data(),
                                                          dst_ld);
      for (int64_t w = 0; w < W; ++w)
        for (int64_t p = 0; p < dst_ld; ++p) {
          uint32_t want = kUntouched;
          if (p < np)
            want = pair_of(src16[2 * p * ld + w], 2 * p + 1 < K ? src16[(2 * p + 1) * ld + w] : 0);
          ASSERT_EQ(got[w * dst_ld + p], want) << "row " << w << " pair " << p;
          ASSERT_EQ(got16[w * dst_ld + p], want) << "bf16 source, row " << w << " pair " << p;
        }
    }
}

// The packing of op(B) = Bᵀ (the forward's weights, B [W][K]), called
// directly: dst[p * dst_ld + w] holds (src[w][2p], src[w][2p+1]) rounded to
// nearest even (bf16 sources as they are), the high half 0 past an odd K;
// columns from W up to the next multiple of 16 (and below dst_ld) are 0, and
// nothing else is written. K around the 16 pairs one pass transposes, widths
// around 16 rows, and both the per-block calls pack_b_pairs makes and one
// call over all the rows.
TEST(GemmBf16Packing, GatherPairsStoresEachRowsPairsAcross) {
  if (detected_isa() < Isa::avx512bf16) GTEST_SKIP() << "AVX512-BF16 not on this CPU";
  std::mt19937 rng(35);
  constexpr uint32_t kUntouched = 0xdeadbeefu;
  for (int64_t K : {1, 2, 31, 32, 33, 64, 70})
    for (int64_t W : {1, 15, 16, 17, 40})
      for (int64_t dst_ld : {(W + 15) / 16 * 16 + 16, W + 3})
        for (bool per_block : {true, false}) {
          SCOPED_TRACE(::testing::Message() << "K " << K << " W " << W << " dst_ld " << dst_ld
                                            << (per_block ? " per block" : " one call"));
          const int64_t ld = K + 5, np = kernels::bf16gemm::pairs(K);
          const VecF src = random_vec(rng, W * ld);
          const std::vector<uint16_t> src16 = bf16_bits(src);
          std::vector<uint32_t> got(np * dst_ld, kUntouched), got16(np * dst_ld, kUntouched);
          for (int64_t w0 = 0; w0 < W; w0 += per_block ? 16 : W) {
            const int64_t w1 = per_block ? std::min(W, w0 + 16) : W;
            pairs_of(Isa::avx512bf16).from_f32.gather_pairs(src.data(), ld, W, K, w0, w1, got.data(),
                                                            dst_ld);
            pairs_of(Isa::avx512bf16).from_bf16.gather_pairs(src16.data(), ld, W, K, w0, w1,
                                                             got16.data(), dst_ld);
          }
          const int64_t padded = std::min(dst_ld, (W + 15) / 16 * 16);
          for (int64_t p = 0; p < np; ++p)
            for (int64_t w = 0; w < dst_ld; ++w) {
              uint32_t want = w < padded ? 0u : kUntouched;
              if (w < W)
                want = pair_of(src16[w * ld + 2 * p], 2 * p + 1 < K ? src16[w * ld + 2 * p + 1] : 0);
              ASSERT_EQ(got[p * dst_ld + w], want) << "pair " << p << " row " << w;
              ASSERT_EQ(got16[p * dst_ld + w], want) << "bf16 source, pair " << p << " row " << w;
            }
        }
}

}  // namespace
