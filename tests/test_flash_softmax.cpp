// The forward's online-softmax micro-kernels (core/kernels), called directly:
// - FlashKernels::softmax on every ISA path this CPU has, against a float64
//   transcription of its contract (flash_kernels.h), at the column counts of
//   prefill panels (> 4: column vectors) and of decode's stacked GQA groups
//   (<= 4: four keys to a vector, softmax_quads), with key counts that leave
//   partial vectors, masked (-inf) scores and a column that has seen no key;
// - softmax_pairs_bf16_avx512 (AVX512-BF16 only) against softmax followed by
//   pack_p_bf16_avx512, the path it replaces: the same bits.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/isa_kernels.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_kernels.h"
#include "isa_fixture.h"

using namespace qkv;
using kernels::kBR;
using kernels::kBC;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One tile's inputs: scores St [kBC][kBR] (keys in rows), and the running
// (m, l) of every column. Column 1 has seen no key yet and all its scores
// are masked; a few other scores are masked too.
struct Tile {
  std::vector<float> St, m, l;
  Tile(std::mt19937& rng, int64_t nj) : St(kBC * kBR), m(kBR), l(kBR) {
    std::uniform_real_distribution<float> score(-8.0f, 8.0f), unit(0.0f, 1.0f);
    for (float& s : St) s = score(rng);
    for (int i = 0; i < kBR; ++i) {
      m[i] = i % 3 == 0 ? kNegInf : score(rng);  // every third column: no key so far
      l[i] = m[i] == kNegInf ? 0.0f : 1.0f + 4.0f * unit(rng);
    }
    m[1] = kNegInf, l[1] = 0.0f;
    for (int64_t j = 0; j < nj; ++j) St[j * kBR + 1] = kNegInf;
    for (int64_t j = 0; j < nj; j += 3) St[j * kBR + 2] = kNegInf;
  }
};

class FlashSoftmax : public test::OnIsa {};

// The contract, in float64: m' = max(m, max_j s), p_j = exp(s_j - m'),
// alpha = exp(m - m'), l' = alpha l + sum_j p_j; a column with no finite
// score keeps m = -inf, l = 0, alpha = 0 and weights 0, never NaN. The
// kernels subtract in float32 (up to half an ulp of 16, 1e-6 relative after
// exp) and their exp is within 2 ulp: 4e-6 relative allows both; a wrong
// key, column or rescale is off by far more.
TEST_P(FlashSoftmax, FollowsTheOnlineSoftmaxStepInFloat64) {
  const kernels::FlashKernels& kern = *kernels::isa_kernels(GetParam()).flash;
  std::mt19937 rng(7);
  for (int ncols : {1, 2, 3, 4, 5, 16, 17, 64})
    for (int64_t nj : {1, 2, 3, 5, 63, 64}) {
      SCOPED_TRACE(::testing::Message() << "ncols " << ncols << " nj " << nj);
      Tile in(rng, nj);
      Tile out = in;
      std::vector<float> alpha(kBR);
      kern.softmax(out.St.data(), nj, ncols, out.m.data(), out.l.data(), alpha.data());
      for (int i = 0; i < ncols; ++i) {
        double mx = in.m[i];
        for (int64_t j = 0; j < nj; ++j) mx = std::fmax(mx, in.St[j * kBR + i]);
        ASSERT_EQ(out.m[i], static_cast<float>(mx)) << "column " << i;
        if (mx == -INFINITY) {
          EXPECT_EQ(out.l[i], 0.0f) << "column " << i;
          EXPECT_EQ(alpha[i], 0.0f) << "column " << i;
          for (int64_t j = 0; j < nj; ++j) EXPECT_EQ(out.St[j * kBR + i], 0.0f) << "key " << j;
          continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < nj; ++j) {
          const double p = std::exp(static_cast<double>(in.St[j * kBR + i]) - mx);
          sum += p;
          EXPECT_NEAR(out.St[j * kBR + i], p, 4e-6 * p + 1e-30) << "column " << i << " key " << j;
        }
        const double a = in.m[i] == kNegInf ? 0.0 : std::exp(in.m[i] - mx);
        EXPECT_NEAR(alpha[i], a, 4e-6 * a) << "column " << i;
        const double l = a * in.l[i] + sum;
        EXPECT_NEAR(out.l[i], l, 4e-6 * l) << "column " << i;
      }
    }
}

// The softmax's e^x alone: with m = 0 and every score <= 0 the weights are
// exp(s) with no subtraction error, so they must be within 2 float32 ulp of
// the float64 exp over the whole range down to e^-87.3 (just above 2^-126);
// below it the vector paths give exactly 0, never a denormal (the scalar
// path's std::exp goes on into denormals). In the column form (16 columns)
// and in the quads of decode's stacked groups (4 columns).
TEST_P(FlashSoftmax, ExpIsWithin2UlpDownToUnderflow) {
  const kernels::FlashKernels& kern = *kernels::isa_kernels(GetParam()).flash;
  for (int ncols : {4, 16}) {
    for (int64_t base = 0; base < 88 * 1024; base += kBC * ncols) {
      std::vector<float> St(kBC * kBR), m(kBR, 0.0f), l(kBR, 0.0f), alpha(kBR), x(kBC * kBR);
      for (int64_t j = 0; j < kBC; ++j)
        for (int i = 0; i < ncols; ++i)  // x from 0 down to -88 in steps of ~1/1024
          x[j * kBR + i] = St[j * kBR + i] = -static_cast<float>(base + j * ncols + i) / 1023.7f;
      kern.softmax(St.data(), kBC, ncols, m.data(), l.data(), alpha.data());
      for (int64_t j = 0; j < kBC; ++j)
        for (int i = 0; i < ncols; ++i) {
          const float xs = x[j * kBR + i], w = St[j * kBR + i];
          const double e = std::exp(static_cast<double>(xs));
          if (xs < -87.3f) {
            if (GetParam() != Isa::scalar) {
              ASSERT_EQ(w, 0.0f) << "x " << xs;
            }
            continue;
          }
          ASSERT_GE(w, std::numeric_limits<float>::min()) << "x " << xs;
          const double ulp = std::ldexp(1.0, std::ilogb(e) - 23);
          ASSERT_LE(std::fabs(w - e), 2 * ulp) << "x " << xs << " exp " << e;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FlashSoftmax,
                         ::testing::ValuesIn(all_isas()),
                         test::isa_test_name);

// The bf16 prefill's fused step gives exactly the weights, (m, l) and alpha
// of the float32 softmax followed by pack_p, for the prefill column counts it
// serves, with odd key counts (the last pair's high half 0).
TEST(FlashSoftmaxPairs, MatchesSoftmaxThenPackBitForBit) {
  if (detected_isa() < Isa::avx512bf16) GTEST_SKIP() << "AVX512-BF16 not on this CPU";
  const kernels::FlashKernels& kern = *kernels::isa_kernels(Isa::avx512).flash;
  std::mt19937 rng(11);
  for (int ncols : {5, 16, 17, 64})
    for (int64_t nj : {1, 2, 7, 63, 64}) {
      SCOPED_TRACE(::testing::Message() << "ncols " << ncols << " nj " << nj);
      const Tile in(rng, nj);
      Tile a = in, b = in;
      std::vector<float> alpha_a(kBR), alpha_b(kBR);
      const int64_t pairs = kernels::bf16_pairs(nj);
      std::vector<uint32_t> P2a(pairs * kBR), P2b(pairs * kBR);
      kern.softmax(a.St.data(), nj, ncols, a.m.data(), a.l.data(), alpha_a.data());
      kernels::pack_p_bf16_avx512(P2a.data(), a.St.data(), nj, ncols);
      kernels::softmax_pairs_bf16_avx512(P2b.data(), b.St.data(), nj, ncols, b.m.data(),
                                         b.l.data(), alpha_b.data());
      for (int i = 0; i < ncols; ++i) {
        EXPECT_EQ(a.m[i], b.m[i]) << "column " << i;
        EXPECT_EQ(a.l[i], b.l[i]) << "column " << i;
        EXPECT_EQ(alpha_a[i], alpha_b[i]) << "column " << i;
        for (int64_t t = 0; t < pairs; ++t)
          EXPECT_EQ(P2a[t * kBR + i], P2b[t * kBR + i]) << "column " << i << " pair " << t;
      }
      EXPECT_EQ(b.St, in.St) << "the scores are only read";
    }
}

}  // namespace
