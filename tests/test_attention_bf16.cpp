// test_attention_bf16.cpp: bfloat16 storage with float32 accumulation.
//
// Truth is float64 maths on the very bf16 values (widened exactly). Two rules:
//  - the widening paths (avx512, avx2, scalar: bf16 tiles widened to
//    float32) must give the float32 kernel's results bit for bit, and the
//    error of every path's lse is at most 2x the float32 kernel's;
//  - avx512bf16 rounds prefill's weights to bf16 for its P·V (as PyTorch's
//    and FlashAttention's bf16 kernels do). bf16 keeps 8 significant bits:
//    rounding a weight w_j to nearest moves it by at most 2^-8 w_j, and an
//    output by at most 2^-8 sum_j w_j |v_j|. Every output element must lie
//    within that of the truth, plus a float32 floor for the sums, plus 2^-8
//    of its value when the output itself is bf16. Decode rounds them too.
// (The comparison with PyTorch's own bf16 SDPA is in
// tests/python/test_bf16.py.)
#include <gtest/gtest.h>

#include "isa_fixture.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "core/ops/attention_backends.h"
#include "core/ops/attention_checks.h"
#include "core/ops/attention_operands.h"
#include "qkv/attention.h"
#include "qkv/runtime.h"
#include "random_inputs.h"
#include "strided.h"

namespace qkv {

namespace {

using test_inputs::join;
using test_inputs::normal;
using test_inputs::random_mask;

TEST(Bf16Convert, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(bf16_from_float(1.0f).bits, 0x3f80);
  // 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7: ties go to even.
  EXPECT_EQ(bf16_from_float(1.0f + 0x1p-8f).bits, 0x3f80);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(bf16_from_float(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  EXPECT_EQ(bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3f81);  // past half: up
  EXPECT_EQ(bf16_from_float(-2.0f).bits, 0xc000);
  EXPECT_EQ(bf16_from_float(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16_from_float(INFINITY).bits, 0x7f80);
  EXPECT_EQ(bf16_from_float(-INFINITY).bits, 0xff80);
  // The largest float32 is above bf16's largest finite value by more than
  // half an ulp: it rounds to Inf, as in IEEE.
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()).bits, 0x7f80);
  // A NaN whose payload sits only in the low 16 bits must not truncate to Inf.
  const uint32_t nan_low = 0x7f800001u;
  float f;
  std::memcpy(&f, &nan_low, sizeof f);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(f))));
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(-NAN))));
  EXPECT_TRUE(std::signbit(bf16_to_float(bf16_from_float(-NAN))));
  // Every bf16 survives the round trip through float32.
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const bfloat16 x{static_cast<uint16_t>(b)};
    if (std::isnan(bf16_to_float(x))) continue;
    ASSERT_EQ(bf16_from_float(bf16_to_float(x)).bits, x.bits) << b;
  }
}

TEST(Bf16Convert, TensorTo) {
  const Tensor t = Tensor::from<float>({4}, {1.0f, 1.0f + 0x1p-8f, -3.5f, 1e-3f});
  const Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.nbytes(), 8u);
  EXPECT_EQ(b.get(0), 1.0);
  EXPECT_EQ(b.get(1), 1.0);
  EXPECT_EQ(b.get(2), -3.5);
  EXPECT_NEAR(b.get(3), 1e-3, 1e-3 * 0x1p-8);
  EXPECT_EQ(b.to(DType::f64).get(2), -3.5);
  EXPECT_STREQ(dtype_name(DType::bf16), "bfloat16");
}

TEST(Bf16Op, Checks) {
  std::mt19937_64 gen(7);
  const Tensor q = normal({2, 3, 8}, gen, DType::bf16), k = normal({2, 5, 8}, gen, DType::bf16),
               v = normal({2, 5, 8}, gen, DType::bf16);
  AttentionOptions o;
  EXPECT_EQ(attention(q, k, v).out.dtype(), DType::bf16);
  o.out_dtype = DType::f32;
  o.return_lse = o.return_weights = true;
  const AttentionResult r = attention(q, k, v, o);
  EXPECT_EQ(r.out.dtype(), DType::f32);
  EXPECT_EQ(r.lse.dtype(), DType::f32);
  EXPECT_EQ(r.weights.dtype(), DType::f32);
  o.out_dtype = DType::f64;
  EXPECT_THROW(attention(q, k, v, o), Error);
  o.out_dtype = DType::bf16;  // float32 inputs cannot ask for a bf16 out
  EXPECT_THROW(attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o), Error);
  EXPECT_THROW(attention(q, k.to(DType::f32), v), Error);  // mixed dtypes
  Tensor bad = k;
  bad.data<bfloat16>()[17] = bf16_from_float(NAN);
  try {
    attention(q, bad, v);
    FAIL() << "NaN in bf16 k was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k: values must be finite, found NaN at [0, 2, 1]"),
              std::string::npos)
        << e.what();
  }
}

// Root mean square of a - b over all elements (b the float64 truth).
double rms_err(const Tensor& a, const Tensor& truth) {
  double s = 0;
  for (int64_t i = 0; i < truth.numel(); ++i) {
    const double d = a.get(i) - truth.get(i);
    s += d * d;
  }
  return std::sqrt(s / static_cast<double>(truth.numel()));
}

double rms(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get(i) * t.get(i);
  return std::sqrt(s / static_cast<double>(t.numel()));
}

class Bf16Kernel : public qkv::test::OnIsa {};

struct Case {
  Shape lead;
  int64_t Hq, Hkv, N, S, D, Dv;
  int mask_kind;
  Causal causal;
  int layout;  // 0 C order, 1 padded rows (KV-cache-like strides), 2 heads and rows swapped, 3 Fortran q
  DType out;
};

Case random_case(std::mt19937_64& gen, bool decode) {
  auto pick = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(gen));
  };
  Case c;
  c.lead = pick({0, 1, 2}) == 0 ? Shape{} : pick({0, 1}) ? Shape{2} : Shape{1, 2};
  c.Hkv = pick({1, 2});
  c.Hq = c.Hkv * pick({1, 2, 4});
  c.N = decode ? pick({1, 2, 3}) : pick({5, 17, 64, 65, 130});
  c.S = pick({1, 7, 64, 100, 300});
  c.D = pick({1, 3, 8, 15, 32, 64, 128});
  c.Dv = pick({1, 5, 16, 40, 64, 118, 128});  // 40, 118: 1-4 vectors past the last whole 64
  c.mask_kind = static_cast<int>(pick({0, 0, 1, 2, 4, 5}));
  c.causal = pick({0, 1, 2}) == 0 ? Causal::none : pick({0, 1}) ? Causal::top_left : Causal::bottom_right;
  c.layout = static_cast<int>(pick({0, 1, 2, 3}));
  c.out = pick({0, 1}) ? DType::f32 : DType::bf16;
  return c;
}

// `t` laid out as `layout` says (the values unchanged).
test_strided::Strided lay_out(const Tensor& t, int layout, bool is_q) {
  const int r = t.rank();
  std::vector<int> order(r);
  for (int a = 0; a < r; ++a) order[a] = a;
  if (layout == 2) std::swap(order[r - 3], order[r - 2]);  // [..., L, H, E] in memory
  if (layout == 3 && is_q) return test_strided::fortran(t);
  return test_strided::restride(t, order, layout == 0 ? 0 : 1);
}

std::string describe(const Case& c) {
  return "lead " + shape_str(c.lead) + " Hq " + std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) +
         " N " + std::to_string(c.N) + " S " + std::to_string(c.S) + " D " + std::to_string(c.D) +
         " Dv " + std::to_string(c.Dv) + " mask " + std::to_string(c.mask_kind) + " causal " +
         causal_name(c.causal) + " layout " + std::to_string(c.layout) + " out " + dtype_name(c.out);
}

// The second rule: |got - truth| <= 2^-8 sum_j w_j |v_j| (+ 2^-8 |truth| for
// a bf16 out, + a float32 floor) element by element, the sums from the
// float64 reference run on |v|.
void expect_within_weight_rounding(const Tensor& got, const Tensor& truth, const Tensor& q,
                                   const Tensor& k, const Tensor& v, const AttentionOptions& o64,
                                   bool bf16_out) {
  Tensor abs_v = v.to(DType::f64);
  double* av = abs_v.data<double>();
  for (int64_t i = 0; i < abs_v.numel(); ++i) av[i] = std::fabs(av[i]);
  const Tensor spread = attention(q.to(DType::f64), k.to(DType::f64), abs_v, o64).out;
  int bad = 0;
  for (int64_t i = 0; i < truth.numel() && bad < 5; ++i) {
    const double t = truth.get(i), a = spread.get(i);
    const double tol = 0x1p-8 * a + (bf16_out ? 0x1p-8 * std::fabs(t) : 0.0) + 0x1p-22 * a + 1e-30;
    if (std::fabs(got.get(i) - t) > tol) {
      ADD_FAILURE() << "element " << i << ": got " << got.get(i) << ", truth " << t
                    << ", allowed +-" << tol << " (sum w|v| = " << a << ")";
      ++bad;
    }
  }
}

// Runs one case through the rules; `bitwise` also demands the float32
// kernel's exact results (the widening paths), `rounds_weights` takes the
// second rule for the output (avx512bf16, whose prefill rounds P to bf16).
void check_case(const Case& c, std::mt19937_64& gen, bool bitwise, bool rounds_weights) {
  SCOPED_TRACE(describe(c));
  const Tensor q = normal(join(c.lead, {c.Hq, c.N, c.D}), gen, DType::bf16);
  const Tensor k = normal(join(c.lead, {c.Hkv, c.S, c.D}), gen, DType::bf16);
  const Tensor v = normal(join(c.lead, {c.Hkv, c.S, c.Dv}), gen, DType::bf16);
  const std::optional<Tensor> mask = random_mask(c.mask_kind, c.lead, c.Hq, c.N, c.S, gen);
  AttentionOptions o;
  o.causal = c.causal;
  if (mask) o.mask = *mask;
  o.return_lse = true;

  // float64 truth on the bf16 values.
  AttentionOptions o64 = o;
  o64.kernel = Kernel::reference;
  const AttentionResult truth = attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), o64);
  // The plain implementation: float32 kernel on the widened inputs.
  AttentionOptions o32 = o;
  o32.kernel = Kernel::fast;
  AttentionResult plain = attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o32);
  if (c.out == DType::bf16) plain.out = plain.out.to(DType::bf16);
  // The bf16 kernel on strided bf16 views.
  const auto qs = lay_out(q, c.layout, true), ks = lay_out(k, c.layout, false),
             vs = lay_out(v, c.layout, false);
  AttentionOptions ob = o32;
  ob.out_dtype = c.out;
  const AttentionResult got = attention(qs.view, ks.view, vs.view, ob);
  ASSERT_EQ(got.out.dtype(), c.out);
  ASSERT_EQ(got.lse.dtype(), DType::f32);

  // Below half a float32 ulp of the typical value both are at the floor of
  // float32 itself; the rule compares errors above it.
  const double floor_out = 0x1p-25 * rms(truth.out);
  const double e_got = rms_err(got.out, truth.out), e_plain = rms_err(plain.out, truth.out);
  if (rounds_weights) {
    expect_within_weight_rounding(got.out, truth.out, q, k, v, o64, c.out == DType::bf16);
  } else {
    EXPECT_LE(e_got, 2 * e_plain + floor_out) << "plain " << e_plain;
  }
  for (int64_t i = 0; i < truth.lse.numel(); ++i)
    if (std::isinf(truth.lse.get(i))) {
      ASSERT_EQ(got.lse.get(i), truth.lse.get(i)) << "row " << i;
    }
  if (bitwise) {
    ASSERT_EQ(got.out.nbytes(), plain.out.nbytes());
    EXPECT_EQ(std::memcmp(got.out.raw(), plain.out.raw(), got.out.nbytes()), 0);
    EXPECT_EQ(std::memcmp(got.lse.raw(), plain.lse.raw(), got.lse.nbytes()), 0);
  }
  {
    Tensor lse_t = truth.lse, lse_g = got.lse, lse_p = plain.lse;  // finite rows only
    double sg = 0, sp = 0, st = 0;
    for (int64_t i = 0; i < lse_t.numel(); ++i) {
      if (std::isinf(lse_t.get(i))) continue;
      sg += std::pow(lse_g.get(i) - lse_t.get(i), 2);
      sp += std::pow(lse_p.get(i) - lse_t.get(i), 2);
      st += std::pow(lse_t.get(i), 2);
    }
    // Floor: 4 float32 ulps of the lse's size. A score is a float32 sum of D
    // products, and vdpbf16ps sums them in another order than the float32
    // kernel's FMA chain: with a handful of rows (S = 1: lse is one score)
    // the two errors are a few ulps apart either way.
    EXPECT_LE(std::sqrt(sg), 2 * std::sqrt(sp) + 0x1p-22 * std::sqrt(st)) << "lse";
  }
}

TEST_P(Bf16Kernel, ErrorRulePrefill) {
  std::mt19937_64 gen(1234);
  const bool dp = GetParam() >= Isa::avx512bf16;
  for (int i = 0; i < 40; ++i) check_case(random_case(gen, false), gen, !dp, dp);
}

TEST_P(Bf16Kernel, ErrorRuleDecode) {
  // avx512bf16 reads K with vdpbf16ps for every panel, so only the widening
  // paths are bitwise.
  // Decode panels of more than 4 rows (a GQA group stacked over N
  // positions) take prefill's P·V, so they round the weights too.
  std::mt19937_64 gen(99);
  const bool dp = GetParam() >= Isa::avx512bf16;
  for (int i = 0; i < 40; ++i) check_case(random_case(gen, true), gen, !dp, dp);
}

// Head sizes the AMX tiles take (D and Dv multiples of 32) against key counts
// around the tiles' edges: a last group of K rows short of 16 (qk_bf16_amx's
// kpad), a last chunk of keys short of 32 (pv_bf16_amx's vpad and zeroed
// weight pairs), panels of 1-4 groups of 16 query columns (N = 17: 17 rows;
// 85 and 100: a whole 64, then 21 and 36 rows) and Dv = 48, an odd count of
// 16-row groups. The fast backend must be the one that runs, on the path
// under test.
TEST_P(Bf16Kernel, TileEdges) {
  std::mt19937_64 gen(77);
  const bool dp = GetParam() >= Isa::avx512bf16;
  int n = 0;
  for (const auto& [D, Dv] : {std::pair<int64_t, int64_t>{32, 48}, {64, 128}, {128, 64}})
    for (int64_t N : {17, 85, 100})
      for (int64_t S : {1, 17, 31, 33, 129}) {
        Case c;
        c.lead = Shape{};
        c.Hkv = 1 + n % 2;
        c.Hq = c.Hkv * (1 + n % 3);
        c.N = N;
        c.S = S;
        c.D = D;
        c.Dv = Dv;
        c.mask_kind = n % 4 == 3 ? 1 : 0;
        c.causal = n % 3 == 0 ? Causal::none : n % 3 == 1 ? Causal::top_left : Causal::bottom_right;
        c.layout = n % 2;
        c.out = n % 5 == 0 ? DType::bf16 : DType::f32;
        ++n;
        check_case(c, gen, !dp, dp);
      }
  const Tensor q = normal({2, 100, 64}, gen, DType::bf16), k = normal({2, 70, 64}, gen, DType::bf16);
  const AttentionProblem p = check_attention_args(q, k, k, {});
  EXPECT_STREQ(select_backend(Kernel::fast, p).name, "fast");
  EXPECT_EQ(active_isa(), GetParam());
}

// A bf16 KV cache [1, Hkv, Smax, D] read as its first len keys: in place (no
// copy), split-KV over several chunks, GQA 32/8 (a stacked panel of 4 rows:
// on avx512bf16 K and V are read in place by vdpbf16ps, V two rows at a
// time; on the other paths the tiles are widened, so bitwise the float32
// kernel's).
TEST_P(Bf16Kernel, DecodeReadsCacheInPlace) {
  std::mt19937_64 gen(5);
  const int64_t Hq = 32, Hkv = 8, D = 128, Smax = 1500, len = 1234;
  const Tensor kc = normal({1, Hkv, Smax, D}, gen, DType::bf16);
  const Tensor vc = normal({1, Hkv, Smax, D}, gen, DType::bf16);
  const Tensor q = normal({1, Hq, 1, D}, gen, DType::bf16);
  const TensorView k = TensorView(kc).slice(-2, 0, len), v = TensorView(vc).slice(-2, 0, len);
  AttentionOptions o;
  o.kernel = Kernel::fast;
  o.out_dtype = DType::f32;
  o.causal = Causal::bottom_right;
  const int64_t copies = input_copies();
  const AttentionResult got = attention(q, k, v, o);
  EXPECT_EQ(input_copies(), copies) << "the bf16 cache slice was copied";
  const AttentionResult plain =
      attention(q.to(DType::f32), k.contiguous().to(DType::f32), v.contiguous().to(DType::f32), o);
  o.kernel = Kernel::reference;
  o.out_dtype.reset();
  const AttentionResult truth =
      attention(q.to(DType::f64), k.contiguous().to(DType::f64), v.contiguous().to(DType::f64), o);
  if (GetParam() >= Isa::avx512bf16) {  // weights rounded to bf16: the second rule
    expect_within_weight_rounding(got.out, truth.out, q, k.contiguous(), v.contiguous(), o, false);
  } else {
    EXPECT_LE(rms_err(got.out, truth.out), 2 * rms_err(plain.out, truth.out) + 0x1p-25 * rms(truth.out));
    EXPECT_EQ(std::memcmp(got.out.raw(), plain.out.raw(), got.out.nbytes()), 0);
  }
}

// A bf16 out is the float32 out rounded to nearest even, bit for bit: the
// kernel rounds each element as it writes it (prefill, with AMX tile shapes,
// and split-KV decode over several chunks, GQA), and check_finite's scan of
// the decode output reads the bf16 values it wrote.
TEST_P(Bf16Kernel, Bf16OutIsTheFloat32OutRounded) {
  std::mt19937_64 gen(17);
  struct Shape {
    int64_t Hq, Hkv, N, S, D, Dv;
  };
  for (const Shape& c : {Shape{4, 2, 100, 150, 64, 32}, Shape{8, 2, 3, 1100, 32, 48},
                         Shape{2, 1, 70, 90, 24, 16}}) {
    SCOPED_TRACE(::testing::Message() << "Hq " << c.Hq << " N " << c.N << " S " << c.S);
    const Tensor q = normal({2, c.Hq, c.N, c.D}, gen, DType::bf16);
    const Tensor k = normal({2, c.Hkv, c.S, c.D}, gen, DType::bf16);
    const Tensor v = normal({2, c.Hkv, c.S, c.Dv}, gen, DType::bf16);
    AttentionOptions o;
    o.kernel = Kernel::fast;
    o.causal = Causal::bottom_right;
    const AttentionResult b16 = attention(q, k, v, o);
    o.out_dtype = DType::f32;
    const AttentionResult f32 = attention(q, k, v, o);
    ASSERT_EQ(b16.out.dtype(), DType::bf16);
    const Tensor rounded = f32.out.to(DType::bf16);
    EXPECT_EQ(std::memcmp(b16.out.raw(), rounded.raw(), rounded.nbytes()), 0);
  }
}

// Keys past key_lengths are never visible, whatever they hold: with the
// check off, NaN and Inf in V's padding rows must not reach an output. An
// odd length makes the last visible key the low half of a pair whose high
// half is padding (a weight of 0 times NaN is NaN). Several query blocks
// (N > 64) and a window whose edge is odd cover both ways prefill pairs V.
TEST_P(Bf16Kernel, PaddingRowsNeverReachTheOutput) {
  std::mt19937_64 gen(13);
  const int64_t N = 130, S = 200, D = 32;
  const Tensor q = normal({2, 2, N, D}, gen, DType::bf16), k = normal({2, 2, S, D}, gen, DType::bf16);
  Tensor v = normal({2, 2, S, D}, gen, DType::bf16);
  const std::vector<int64_t> lengths = {131, 77};
  bfloat16* vb = v.data<bfloat16>();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t j = lengths[b]; j < S; ++j)
        for (int64_t d = 0; d < D; ++d)
          vb[((b * 2 + h) * S + j) * D + d] = bf16_from_float(j % 2 ? NAN : INFINITY);
  struct Case {
    Causal causal;
    std::optional<SlidingWindow> window;
  };
  for (const Case& c : {Case{Causal::none, std::nullopt}, Case{Causal::top_left, SlidingWindow{40, 0}},
                        Case{Causal::none, SlidingWindow{31, 6}}}) {
    AttentionOptions o;
    o.kernel = Kernel::fast;
    o.check_finite = false;
    o.key_lengths = lengths;
    o.causal = c.causal;
    o.window = c.window;
    const AttentionResult got = attention(q, k, v, o);
    for (int64_t x = 0; x < got.out.numel(); ++x)
      ASSERT_TRUE(std::isfinite(got.out.get(x))) << "out " << x << (c.window ? " with a window" : "");
  }
}

// The weights pass recomputes scores the same way the forward did (D = 64,
// Dv = 32: on AMX tiles; D = 40, Dv = 24: on vdpbf16ps there too).
TEST_P(Bf16Kernel, Weights) {
  std::mt19937_64 gen(11);
  for (const auto& [D, Dv] : {std::pair<int64_t, int64_t>{40, 24}, {64, 32}}) {
    SCOPED_TRACE(D);
    const Tensor q = normal({2, 70, D}, gen, DType::bf16), k = normal({1, 90, D}, gen, DType::bf16),
                 v = normal({1, 90, Dv}, gen, DType::bf16);
    AttentionOptions o;
    o.kernel = Kernel::fast;
    o.return_weights = true;
    o.causal = Causal::top_left;
    const AttentionResult got = attention(q, k, v, o);
    o.kernel = Kernel::reference;
    const AttentionResult truth = attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), o);
    ASSERT_EQ(got.weights.dtype(), DType::f32);
    for (int64_t i = 0; i < truth.weights.numel(); ++i)
      ASSERT_NEAR(got.weights.get(i), truth.weights.get(i), 2e-6) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, Bf16Kernel,
                         ::testing::ValuesIn(all_isas()),
                         qkv::test::isa_test_name);

}  // namespace
}  // namespace qkv
