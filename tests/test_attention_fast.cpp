// The fast kernel against the reference, on every SIMD path this CPU can run
// (scalar, AVX2, AVX-512; a path the CPU lacks is skipped, never faked).
//
// Accuracy rule (FlashAttention's): for each case the truth is the reference
// kernel on float64 copies of the float32 inputs, and the fast kernel's
// largest error against it may be at most twice that of a plain float32
// implementation (float32 scores, softmax and P·V, written out below), plus
// 1e-5 absolute for cases where plain float32 happens to be exact. The same
// rule holds for the weights and the log-sum-exp when they are requested.
//
// Also: rows with no visible key are exactly 0 with lse = -inf; results are
// bitwise identical for any thread count; and the fast kernel is float32
// only: Kernel::fast on float64 throws, Kernel::automatic runs the reference.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "isa_fixture.h"

#include "core/ops/attention_checks.h"
#include "qkv/attention.h"
#include "random_inputs.h"
#include "qkv/runtime.h"
#include "test_scale.h"

namespace qkv {
// Test names and ctest list the path by name, not as raw bytes.
}  // namespace qkv

using namespace qkv;
using namespace qkv::test_inputs;
using ::testing::HasSubstr;

namespace {

struct Case {
  std::string name;
  Tensor q, k, v;               // float32
  std::optional<Tensor> mask;
  AttentionOptions opts;        // everything but the mask pointer

  AttentionOptions options(Kernel kernel) const {
    AttentionOptions o = opts;
    o.mask = mask ? TensorView(*mask) : TensorView();
    o.kernel = kernel;
    return o;
  }
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << c.name << ": q " << shape_str(c.q.shape()) << " k " << shape_str(c.k.shape()) << " v "
    << shape_str(c.v.shape()) << " causal " << causal_name(c.opts.causal);
  if (c.mask) s << " mask " << dtype_name(c.mask->dtype()) << shape_str(c.mask->shape());
  if (c.opts.window) s << " window " << c.opts.window->left << "," << c.opts.window->right;
  if (!c.opts.key_lengths.empty()) {
    s << " key_lengths";
    for (int64_t l : c.opts.key_lengths) s << " " << l;
  }
  if (!c.opts.alibi_slopes.empty()) s << " alibi";
  if (c.opts.softcap > 0) s << " softcap " << c.opts.softcap;
  if (c.opts.scale) s << " scale " << *c.opts.scale;
  if (c.opts.return_weights) s << " +weights";
  if (c.opts.return_lse) s << " +lse";
  s << " threads " << c.opts.threads;
  return s.str();
}

// The ALiBi paper's slopes for a power-of-two head count (enough for tests).
std::vector<double> geometric_slopes(int64_t heads) {
  std::vector<double> s;
  for (int64_t h = 0; h < heads; ++h) s.push_back(std::exp2(-8.0 * double(h + 1) / double(heads)));
  return s;
}

// Sizes around the tile and vector widths (64-row tiles, 8 and 16 lanes).
constexpr std::array<int64_t, 7> kSizes = {1, 3, 17, 63, 65, 129, 255};
// Long key lengths for decode shapes, across the split-KV chunk size.
constexpr std::array<int64_t, 3> kLongS = {513, 1100, 2049};
// Multiply-adds per case (B·Hq·N·S·(D+Dv)). The float64 truth and the plain
// float32 pass dominate the time: 300 cases on all three paths took 13 s one
// after another (6 s under ctest -j2) in a Release build on 2 cores.
constexpr int64_t kBudget = 6'000'000;

Case random_case(uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(gen); };
  auto size = [&] { return kSizes[uniform(0, kSizes.size() - 1)]; };
  Shape lead;
  int64_t Hkv, group, N, S, D, Dv;
  do {
    lead.assign(uniform(0, 2), 0);
    for (int64_t& d : lead) d = uniform(1, 3);
    Hkv = uniform(1, 3);
    group = std::array{1, 2, 4}[uniform(0, 2)];
    N = seed % 9 == 0 ? 1 : size();
    S = seed % 11 == 0 ? 1 : size();
    if (N <= 3 && chance(0.3)) S = kLongS[uniform(0, kLongS.size() - 1)];
    D = size();
    Dv = chance(0.3) ? D : size();
  } while (shape_numel(lead) * Hkv * group * N * S * (D + Dv) > kBudget);
  const int64_t Hq = Hkv * group, B = shape_numel(lead);

  Case c;
  c.name = "seed " + std::to_string(seed);
  c.q = normal(join(lead, {Hq, N, D}), gen);
  c.k = normal(join(lead, {Hkv, S, D}), gen);
  c.v = normal(join(lead, {Hkv, S, Dv}), gen);
  // 0 none, 1 bool, 2 float32, 3 float64, 4 bool broadcast, 5 float32 broadcast.
  c.mask = random_mask(static_cast<int>(seed % 6), lead, Hq, N, S, gen);
  c.opts.causal = std::array{Causal::none, Causal::top_left, Causal::bottom_right}[(seed / 6) % 3];
  constexpr std::array<int64_t, 7> kSides = {-1, 0, 1, 2, 16, 64, 200};
  if (chance(0.4)) c.opts.window = SlidingWindow{kSides[uniform(0, 6)], kSides[uniform(0, 6)]};
  if (chance(0.3))
    for (int64_t b = 0; b < B; ++b)
      c.opts.key_lengths.push_back(std::array{int64_t{0}, S, uniform(0, S)}[uniform(0, 2)]);
  if (chance(0.3)) {
    if (Hq == 1 || Hq == 2 || Hq == 4 || Hq == 8) {
      c.opts.alibi_slopes = geometric_slopes(Hq);
    } else {
      for (int64_t h = 0; h < Hq; ++h)
        c.opts.alibi_slopes.push_back(std::uniform_real_distribution<double>(0, 1)(gen));
    }
  }
  if (chance(0.3)) c.opts.softcap = std::array{1.0, 5.0, 30.0}[uniform(0, 2)];
  if (chance(0.3)) c.opts.scale = std::array{1.0, 0.05, 2.5, -0.7}[uniform(0, 3)];
  c.opts.return_weights = chance(0.5);
  c.opts.return_lse = chance(0.5);
  c.opts.threads = std::array{0, 1, 3}[uniform(0, 2)];
  return c;
}

Case fixed_case(const std::string& name, Shape lead, int64_t Hq, int64_t Hkv, int64_t N, int64_t S,
                int64_t D, int64_t Dv) {
  std::mt19937_64 gen(1);
  Case c;
  c.name = name;
  c.q = normal(join(lead, {Hq, N, D}), gen);
  c.k = normal(join(lead, {Hkv, S, D}), gen);
  c.v = normal(join(lead, {Hkv, S, Dv}), gen);
  c.opts.return_weights = c.opts.return_lse = true;
  return c;
}

// Decode against a long KV cache: one query row, the split-KV path.
Case decode_case() {
  Case c = fixed_case("decode", {}, 8, 2, 1, 5000, 64, 64);
  c.opts.causal = Causal::bottom_right;
  return c;
}

Case prefill_case() {
  Case c = fixed_case("causal prefill", {}, 4, 4, 300, 300, 64, 64);
  c.opts.causal = Causal::top_left;
  return c;
}

// Every option at once, across tile edges.
Case mixed_case() {
  Case c = fixed_case("mixed", {2}, 4, 2, 129, 255, 65, 17);
  c.opts.causal = Causal::bottom_right;
  c.opts.window = SlidingWindow{40, 3};
  c.opts.key_lengths = {200, 0};
  c.opts.alibi_slopes = geometric_slopes(4);
  c.opts.softcap = 5.0;
  Tensor m(DType::boolean, {129, 1});
  for (int64_t i = 0; i < 129; ++i) m.data<bool>()[i] = i % 7 != 3;
  c.mask = std::move(m);
  return c;
}

std::vector<Case> edge_cases() {
  std::vector<Case> cases = {fixed_case("N = S = D = 1", {}, 1, 1, 1, 1, 1, 1), decode_case(),
                             prefill_case(), mixed_case()};
  Case window = decode_case();
  window.name = "decode, window and ALiBi";
  window.opts.window = SlidingWindow{1000, 0};
  window.opts.alibi_slopes = geometric_slopes(8);
  cases.push_back(window);
  Case padded = fixed_case("padding", {3}, 2, 1, 65, 129, 17, 33);
  padded.opts.key_lengths = {0, 129, 40};
  padded.opts.causal = Causal::bottom_right;
  cases.push_back(padded);
  Case tall = fixed_case("N > S bottom-right", {}, 2, 2, 129, 17, 8, 8);
  tall.opts.causal = Causal::bottom_right;  // rows 0..111 see nothing
  cases.push_back(tall);
  Case diag = fixed_case("window 0,0", {}, 1, 1, 65, 65, 63, 63);
  diag.opts.window = SlidingWindow{0, 0};
  cases.push_back(diag);
  Case rows = fixed_case("masked-out rows", {}, 3, 1, 70, 66, 16, 5);
  Tensor m(DType::f32, {70, 1});  // -inf on every third row
  for (int64_t i = 0; i < 70; ++i) m.data<float>()[i] = i % 3 ? 0.5f * float(i % 5) : -INFINITY;
  rows.mask = std::move(m);
  cases.push_back(rows);
  Case capped = fixed_case("softcap bites", {}, 2, 1, 33, 200, 129, 7);
  capped.opts.scale = 2.5;  // scores of ~±30 before the cap
  capped.opts.softcap = 5.0;
  cases.push_back(capped);
  return cases;
}

// The plain float32 implementation: every step in float32, naively, in the
// textbook order. Visibility comes from the checked problem, as for every
// kernel; only the arithmetic is plain.
AttentionResult plain_float32(const Case& c) {
  const AttentionOptions o = c.options(Kernel::reference);
  const AttentionProblem p = check_attention_args(c.q, c.k, c.v, o);
  AttentionResult r;
  r.out = Tensor(DType::f32, join(p.lead, {p.Hq, p.N, p.Dv}));
  r.weights = Tensor(DType::f32, join(p.lead, {p.Hq, p.N, p.S}));
  r.lse = Tensor(DType::f32, join(p.lead, {p.Hq, p.N}));
  const float* Q = c.q.data<float>();
  const float* K = c.k.data<float>();
  const float* V = c.v.data<float>();
  const float scale = static_cast<float>(p.scale), cap = static_cast<float>(p.softcap);
  std::vector<float> s(p.S);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t bh = b * p.Hq + h, bg = b * p.Hkv + h / p.group;
      for (int64_t i = 0; i < p.N; ++i) {
        const int64_t row = bh * p.N + i, first = p.first_key(i), last = p.last_key(b, i);
        float m = -INFINITY;
        for (int64_t j = 0; j < p.S; ++j) {
          bool visible = first <= j && j <= last;
          float bias = 0.0f;
          if (p.alibi_slopes)
            bias = -static_cast<float>((*p.alibi_slopes)[h]) *
                   static_cast<float>(std::abs(p.diag(i) - j));
          if (p.mask.present()) {
            const int64_t at = p.mask.head_offset[bh] + i * p.mask.stride_n + j * p.mask.stride_s;
            visible = visible && !p.mask.hides(at);
            bias += static_cast<float>(p.mask.bias(at));
          }
          float x = -INFINITY;
          if (visible) {
            float dot = 0.0f;
            for (int64_t d = 0; d < p.D; ++d) dot += Q[row * p.D + d] * K[(bg * p.S + j) * p.D + d];
            x = dot * scale;
            if (cap > 0.0f) x = cap * std::tanh(x / cap);
            x += bias;
          }
          s[j] = x;
          m = std::max(m, x);
        }
        float* out = r.out.data<float>() + row * p.Dv;
        float* w = r.weights.data<float>() + row * p.S;
        r.lse.data<float>()[row] = -INFINITY;
        if (m == -INFINITY) continue;  // no visible key: zeros, lse = -inf
        float sum = 0.0f;
        for (int64_t j = 0; j < p.S; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        for (int64_t j = 0; j < p.S; ++j) {
          w[j] = s[j] / sum;
          for (int64_t e = 0; e < p.Dv; ++e) out[e] += w[j] * V[(bg * p.S + j) * p.Dv + e];
        }
        r.lse.data<float>()[row] = m + std::log(sum);
      }
    }
  return r;
}

// max |got - want|; infinite if any entry is NaN or does not match an
// infinite `want` exactly (lse = -inf on empty rows).
double max_err(const Tensor& got, const Tensor& want) {
  double err = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if (std::isnan(g) || (std::isinf(w) && g != w) || (!std::isinf(w) && std::isinf(g)))
      return INFINITY;
    if (!std::isinf(w)) err = std::max(err, std::fabs(g - w));
  }
  return err;
}

void expect_rule(const char* what, const Tensor& fast, const Tensor& plain, const Tensor& truth) {
  ASSERT_EQ(fast.dtype(), DType::f32) << what;
  ASSERT_EQ(fast.shape(), truth.shape()) << what;
  const double err = max_err(fast, truth), plain_err = max_err(plain, truth);
  EXPECT_LE(err, 2.0 * plain_err + 1e-5)
      << what << ": fast error " << err << ", plain float32 error " << plain_err;
}

// The fast kernel on c, checked against the truth by the rule above.
void check_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  const AttentionResult fast = attention(c.q, c.k, c.v, c.options(Kernel::fast));
  AttentionOptions t = c.options(Kernel::reference);
  t.return_lse = true;  // marks the rows with no visible key
  const AttentionResult truth =
      attention(c.q.to(DType::f64), c.k.to(DType::f64), c.v.to(DType::f64), t);
  const AttentionResult plain = plain_float32(c);
  expect_rule("out", fast.out, plain.out, truth.out);
  if (c.opts.return_weights) expect_rule("weights", fast.weights, plain.weights, truth.weights);
  if (c.opts.return_lse) expect_rule("lse", fast.lse, plain.lse, truth.lse);

  const int64_t Dv = c.v.dim(-1), S = c.k.dim(-2);
  int64_t empty_rows = 0, not_zero = 0;
  for (int64_t row = 0; row < truth.lse.numel(); ++row) {
    if (truth.lse.get(row) != -INFINITY) continue;
    ++empty_rows;
    for (int64_t e = 0; e < Dv; ++e) not_zero += fast.out.get(row * Dv + e) != 0.0;
    if (c.opts.return_weights)
      for (int64_t j = 0; j < S; ++j) not_zero += fast.weights.get(row * S + j) != 0.0;
    if (c.opts.return_lse) not_zero += fast.lse.get(row) != -INFINITY;
  }
  EXPECT_EQ(not_zero, 0) << "entries of the " << empty_rows
                         << " rows with no visible key that are not exactly 0 (lse -inf)";
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class FastKernel : public qkv::test::OnIsa {};

}  // namespace

TEST_P(FastKernel, MatchesTheReferenceOnRandomCases) {
  // At least 36 under QKV_TEST_SCALE: seeds 0..35 meet every mask kind with
  // every causal alignment (seed % 6, seed / 6 % 3) twice, N = 1 (seed % 9)
  // four times and S = 1 (seed % 11) four times.
  const uint64_t cases = qkv_test::scaled_count(300, 36);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    check_case(random_case(seed));
    if (HasFailure()) break;  // one case's report is enough to start from
  }
}

TEST_P(FastKernel, MatchesTheReferenceOnEdgeCases) {
  for (const Case& c : edge_cases()) check_case(c);
}

TEST_P(FastKernel, ThreadCountDoesNotChangeABit) {
  for (const Case& c : {decode_case(), prefill_case(), mixed_case()}) {
    SCOPED_TRACE(describe(c));
    AttentionOptions o = c.options(Kernel::fast);
    o.threads = 1;
    const AttentionResult one = attention(c.q, c.k, c.v, o);
    for (int threads : {2, 3, 5}) {
      o.threads = threads;
      const AttentionResult r = attention(c.q, c.k, c.v, o);
      EXPECT_TRUE(same_bits(r.out, one.out)) << "out, " << threads << " threads";
      EXPECT_TRUE(same_bits(r.weights, one.weights)) << "weights, " << threads << " threads";
      EXPECT_TRUE(same_bits(r.lse, one.lse)) << "lse, " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FastKernel, ::testing::ValuesIn(all_isas()),
                         qkv::test::isa_test_name);

// The fast kernel is float32 only. Asked for by name on float64 it refuses
// (silently computing in float32 would lose what float64 was chosen for);
// Kernel::automatic on float64 runs the reference.
TEST(FastKernelDtypes, Float64GoesToTheReference) {
  Case c = mixed_case();
  c.q = c.q.to(DType::f64);
  c.k = c.k.to(DType::f64);
  c.v = c.v.to(DType::f64);
  try {
    attention(c.q, c.k, c.v, c.options(Kernel::fast));
    ADD_FAILURE() << "Kernel::fast accepted float64";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32"));
  }
  const AttentionResult a = attention(c.q, c.k, c.v, c.options(Kernel::automatic));
  const AttentionResult r = attention(c.q, c.k, c.v, c.options(Kernel::reference));
  EXPECT_TRUE(same_bits(a.out, r.out));
  EXPECT_TRUE(same_bits(a.weights, r.weights));
  EXPECT_TRUE(same_bits(a.lse, r.lse));
}
