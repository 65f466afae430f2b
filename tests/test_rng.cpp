// qkv's NumPy-compatible generators against numbers printed by NumPy 2.4.
//
// Every expected value comes from tests/numpy/gen_rng_expected.py (rerun it
// to regenerate); floats are its repr() output, so each literal is the very
// double NumPy produced and all comparisons are exact (EXPECT_EQ on doubles).
// Long streams are compared through hash_words(), which changes if any single
// value changes, and a left-to-right sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "qkv/rng.h"

namespace {

// FNV-1a over the doubles' 64-bit patterns; the same as hash_words() in
// gen_rng_expected.py.
uint64_t hash_words(const std::vector<double>& values) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (double v : values) {
    uint64_t w;
    std::memcpy(&w, &v, sizeof w);
    h = (h ^ w) * 0x100000001b3ULL;
  }
  return h;
}

double seq_sum(const std::vector<double>& values) {
  double s = 0.0;
  for (double v : values) s += v;
  return s;
}

void expect_all_eq(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "index " << i;
}

// ---- np.random.default_rng ----------------------------------------------------

TEST(NumpyGenerator, RawOutputsMatchPcg64) {
  // default_rng(42).bit_generator.random_raw(6)
  const uint64_t want[] = {0xc621fbcd16d92688ULL, 0x705a5661a791ffc1ULL, 0xdbcd12c26eda1624ULL,
                           0xb286b60e1600888dULL, 0x181c01b5339381ebULL, 0xf9c262ed86c7538cULL};
  qkv::NumpyGenerator g(42);
  for (uint64_t w : want) EXPECT_EQ(g.next_uint64(), w);
}

TEST(NumpyGenerator, SeedWiderThan32BitsUsesTwoEntropyWords) {
  // default_rng(2**40 + 12345).bit_generator.random_raw(3)
  const uint64_t want[] = {0x30abefeb4e0726d8ULL, 0xcd63b0c329a4cc7eULL, 0x262a5e9bc334b2d0ULL};
  qkv::NumpyGenerator g((uint64_t{1} << 40) + 12345);
  for (uint64_t w : want) EXPECT_EQ(g.next_uint64(), w);
}

TEST(NumpyGenerator, Normal42) {
  // default_rng(42).normal(size=12)
  const std::vector<double> want = {
      0.30471707975443135,  -1.0399841062404955, 0.7504511958064572, 0.9405647163912139,
      -1.9510351886538364,  -1.302179506862318,  0.12784040316728537, -0.3162425923435822,
      -0.016801157504288795, -0.85304392757358,   0.8793979748628286, 0.7777919354289483};
  qkv::NumpyGenerator g(42);
  std::vector<double> got(want.size());
  g.normal(got.data(), got.size());
  expect_all_eq(got, want);
}

TEST(NumpyGenerator, Seed0MixedCallsShareOneStream) {
  // g = default_rng(0); g.random(4); g.standard_normal(4); g.normal(5, 2, size=4)
  qkv::NumpyGenerator g(0);
  const double uniform[] = {0.6369616873214543, 0.2697867137638703, 0.04097352393619469,
                            0.016527635528529094};
  for (double w : uniform) EXPECT_EQ(g.random(), w);
  const double standard[] = {-0.535669373161111, 0.36159505490948474, 1.3040000451301372,
                             0.9470809631292422};
  for (double w : standard) EXPECT_EQ(g.standard_normal(), w);
  const double shifted[] = {3.592529528386015, 2.469157057907895, 3.7534510749252954,
                            5.082651958694488};
  for (double w : shifted) EXPECT_EQ(g.normal(5.0, 2.0), w);
}

TEST(NumpyGenerator, DemoSequence) {
  // g = default_rng(42); three g.normal(size=(4, 3)), then g.normal(size=8).
  qkv::NumpyGenerator g(42);
  std::vector<double> all;
  for (size_t n : {12, 12, 12, 8}) {
    std::vector<double> block(n);
    g.normal(block.data(), n);
    all.insert(all.end(), block.begin(), block.end());
  }
  ASSERT_EQ(all.size(), 44u);
  EXPECT_EQ(hash_words(all), 0xa7e6553811130c11ULL);
  EXPECT_EQ(seq_sum(all), 2.383660159497166);
  EXPECT_EQ(all[12], 0.06603069756121605);   // second (4,3) block starts
  EXPECT_EQ(all[23], -0.15452948206880215);
  EXPECT_EQ(all[24], -0.4283278221631072);   // third block
  EXPECT_EQ(all[35], 1.1289722927208916);
  EXPECT_EQ(all[36], -0.11394745765487507);  // the continuing draws
  EXPECT_EQ(all[43], 0.23216132306671977);
}

TEST(NumpyGenerator, LongStreamIncludingTailAndWedge) {
  // default_rng(42).standard_normal(200000). About 1 draw in 256 lands in
  // bin 1, which always takes the wedge test (no part of it lies wholly under
  // the density), and 59 come from the exponential tail beyond r; the hash
  // shows that every one of the 200000 doubles matches.
  qkv::NumpyGenerator g(42);
  std::vector<double> z(200000);
  for (double& v : z) v = g.standard_normal();
  EXPECT_EQ(hash_words(z), 0xeefe3e225e340ba3ULL);
  EXPECT_EQ(seq_sum(z), -151.5659162806305);
  EXPECT_EQ(z[99999], 0.6545907384733584);

  const double r = 3.6541528853610088;  // |z| > r only from the tail branch
  size_t tail = 0, first_tail = 0;
  for (size_t i = 0; i < z.size(); ++i)
    if (std::fabs(z[i]) > r && tail++ == 0) first_tail = i;
  EXPECT_EQ(tail, 59u);
  EXPECT_EQ(first_tail, 5627u);
  EXPECT_EQ(z[first_tail], -4.389114584864837);
  double lo = z[0], hi = z[0];
  for (double v : z) lo = std::fmin(lo, v), hi = std::fmax(hi, v);
  EXPECT_EQ(lo, -4.928238480785121);
  EXPECT_EQ(hi, 5.0072352319089966);
}

// ---- legacy np.random.seed / RandomState ------------------------------------

TEST(NumpyRandomState, RawOutputsMatchMt19937) {
  // np.random.RandomState(0)._bit_generator.random_raw(3)
  qkv::NumpyRandomState rs(0);
  EXPECT_EQ(rs.next_uint32(), 0x8c7f0aacu);
  EXPECT_EQ(rs.next_uint32(), 0x97c4aa2fu);
  EXPECT_EQ(rs.next_uint32(), 0xb716a675u);
}

TEST(NumpyRandomState, Seed1RandomSample) {
  // np.random.seed(1); np.random.random_sample(5)
  const double want[] = {0.417022004702574, 0.7203244934421581, 0.00011437481734488664,
                         0.30233257263183977, 0.14675589081711304};
  qkv::NumpyRandomState rs(1);
  for (double w : want) EXPECT_EQ(rs.random_sample(), w);
}

TEST(NumpyRandomState, Seed0Randn) {
  // np.random.seed(0); np.random.randn(12)
  const std::vector<double> want = {
      1.764052345967664,    0.4001572083672233, 0.9787379841057392,  2.240893199201458,
      1.8675579901499675,   -0.977277879876411, 0.9500884175255894,  -0.1513572082976979,
      -0.10321885179355784, 0.41059850193837233, 0.144043571160878,  1.454273506962975};
  qkv::NumpyRandomState rs(0);
  std::vector<double> got(want.size());
  rs.randn(got.data(), got.size());
  expect_all_eq(got, want);
}

TEST(NumpyRandomState, SpareGaussSurvivesBetweenCalls) {
  // NumPy keeps the second polar value in the state: randn(5), randn(3) == randn(8).
  qkv::NumpyRandomState split(0), whole(0);
  std::vector<double> a(8), b(8);
  split.randn(a.data(), 5);
  split.randn(a.data() + 5, 3);
  whole.randn(b.data(), 8);
  expect_all_eq(a, b);
}

TEST(NumpyRandomState, DemoSequence) {
  // np.random.seed(0); np.random.randn(4, 8); then np.random.randn(8, 8) three times.
  qkv::NumpyRandomState rs(0);
  std::vector<double> all;
  for (size_t n : {32, 64, 64, 64}) {
    std::vector<double> block(n);
    rs.randn(block.data(), n);
    all.insert(all.end(), block.begin(), block.end());
  }
  ASSERT_EQ(all.size(), 224u);
  EXPECT_EQ(hash_words(all), 0x200ca9105f4f2d71ULL);
  EXPECT_EQ(seq_sum(all), 15.259005480101177);
  EXPECT_EQ(all[31], 0.37816251960217356);   // last of the (4, 8) block
  EXPECT_EQ(all[32], -0.8877857476301128);   // first (8, 8) block
  EXPECT_EQ(all[95], 0.7065731681919482);
  EXPECT_EQ(all[223], 0.4814814737734622);
}

TEST(NumpyRandomState, LongStream) {
  // np.random.seed(0); np.random.randn(100000)
  qkv::NumpyRandomState rs(0);
  std::vector<double> z(100000);
  rs.randn(z.data(), z.size());
  EXPECT_EQ(hash_words(z), 0x170e97990fbaa88bULL);
  EXPECT_EQ(seq_sum(z), 157.67005081253245);
  EXPECT_EQ(z[99999], -1.2852076475754735);
}

}  // namespace
