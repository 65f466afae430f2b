// The backward on bfloat16 inputs, on every SIMD path this CPU can run.
//
// Two rules, as for the bf16 forward (test_attention_bf16.cpp):
//  - the widening paths (scalar, avx2, avx512) run the float32 backward on
//    the widened inputs: its float32 gradients bit for bit;
//  - avx512bf16 and amx run all five products on vdpbf16ps, with P and dS
//    rounded to bf16 as operands (as PyTorch's and FlashAttention's bf16
//    kernels do). bf16 keeps 8 significant bits, so rounding a weight moves
//    it by at most 2^-8 of itself, and a gradient element by at most 2^-8
//    of the sum of its terms' magnitudes (a one-term sum gets there: 0.98 of
//    it was seen). Against float64 truth every element must lie within twice
//    that,
//      2^-7 Σ |w| |x|  (dv: w = P, x = dout; dk: w = dS, x = q; dq: w = dS, x = k)
//    plus twice the plain float32 backward's own error at that element, plus
//    a floor of 8 float32 ulps of the magnitudes dS cancels from (see
//    test_attention_backward_fast.cpp: dS = P (dP - D)).
// The truth is the float64 reference forward and backward on the very bf16
// values; both backwards are given its out and lse, so only the backward's
// own arithmetic is judged. (PyTorch's bf16 backward on the same inputs is
// the yardstick of tests/python/test_bf16.py.)
// Also: the same bits for any thread count (one pass and two passes), for a
// visible range as for the same bool mask, for strided q, k, v as for
// C-ordered ones, and for a bf16 out as for its float32 widening; a bf16
// gradient is the float32 one rounded once, and a float32 dout is rounded
// to bf16 first on the vdpbf16ps paths.
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "isa_fixture.h"

#include "backward_cases.h"
#include "core/ops/attention_checks.h"
#include "core/ops/attention_operands.h"
#include "qkv/attention.h"
#include "qkv/runtime.h"
#include "strided.h"

using namespace qkv;

namespace {

using namespace backward_cases;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A case's inputs in bf16, and the float64 truth on their values.
struct Bf16Case {
  Tensor q, k, v, dout;  // bf16
  AttentionOptions opts;
  AttentionResult fwd;   // float64: out, lse, weights
  AttentionGrads truth;  // float64
};

Bf16Case prepare(const Case& c) {
  Bf16Case b{c.q.to(DType::bf16), c.k.to(DType::bf16), c.v.to(DType::bf16), c.dout.to(DType::bf16),
             c.options(Kernel::reference), {}, {}};
  AttentionOptions o64 = b.opts;
  o64.return_weights = true;
  const Tensor q = b.q.to(DType::f64), k = b.k.to(DType::f64), v = b.v.to(DType::f64);
  b.fwd = attention(q, k, v, o64);
  attention_backward_into(b.truth, q, k, v, b.fwd.out, b.fwd.lse, b.dout.to(DType::f64), b.opts);
  return b;
}

// The backward of `b` with `kernel` on the active path, given the truth's
// out and lse in float32, float32 gradients unless bf16_grads, on the case's
// thread count unless `threads` >= 0.
AttentionGrads run(const Bf16Case& b, Kernel kernel, bool bf16_grads = false, int threads = -1) {
  AttentionOptions o = b.opts;
  o.kernel = kernel;
  if (threads >= 0) o.threads = threads;
  if (!bf16_grads) o.out_dtype = DType::f32;
  AttentionGrads g;
  attention_backward_into(g, b.q, b.k, b.v, b.fwd.out.to(DType::f32), b.fwd.lse.to(DType::f32),
                          b.dout, o);
  return g;
}

// The float32 backward on the widened inputs (the widening paths' result).
AttentionGrads widened(const Bf16Case& b, int threads = 0) {
  AttentionOptions o = b.opts;
  o.kernel = Kernel::fast;
  o.threads = threads;
  AttentionGrads g;
  attention_backward_into(g, b.q.to(DType::f32), b.k.to(DType::f32), b.v.to(DType::f32),
                          b.fwd.out.to(DType::f32), b.fwd.lse.to(DType::f32), b.dout.to(DType::f32),
                          o);
  return g;
}

// For each gradient element, the sum of its terms' magnitudes with the
// weights the kernel rounds (`w`: P for dv, |dS| for dk and dq) and the
// magnitudes dS cancels from (`m`: P (|dO|·|v_j| + |D_i|) |scale| for |dS|).
// From the float64 weights; soft-cap's derivative (at most 1) is left out,
// which only widens the bound.
struct Spread {
  Tensor w, m;  // float64, the gradient's shape
};

std::tuple<Spread, Spread, Spread> spreads(const Bf16Case& b) {
  const AttentionProblem p = check_attention_args(b.q, b.k, b.v, b.opts);
  const Tensor q = b.q.to(DType::f64), k = b.k.to(DType::f64), v = b.v.to(DType::f64),
               dO = b.dout.to(DType::f64);
  const double *Q = q.data<double>(), *K = k.data<double>(), *V = v.data<double>(),
               *G = dO.data<double>(), *O = b.fwd.out.data<double>(),
               *W = b.fwd.weights.data<double>();
  auto zeros = [](const Tensor& like) {
    Tensor t(DType::f64, like.shape());
    std::memset(t.raw(), 0, t.nbytes());
    return t;
  };
  Spread sq{zeros(q), zeros(q)}, sk{zeros(k), zeros(k)}, sv{zeros(v), zeros(v)};
  const double scale = std::fabs(p.scale);
  for (int64_t b0 = 0; b0 < p.B; ++b0)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t bh = b0 * p.Hq + h, bg = b0 * p.Hkv + h / p.group;
      for (int64_t i = 0; i < p.N; ++i) {
        const double* dOi = G + (bh * p.N + i) * p.Dv;
        const double* qi = Q + (bh * p.N + i) * p.D;
        double Di = 0, absDi = 0;
        for (int64_t e = 0; e < p.Dv; ++e) Di += dOi[e] * O[(bh * p.N + i) * p.Dv + e];
        absDi = std::fabs(Di);
        for (int64_t j = 0; j < p.S; ++j) {
          const double P = W[(bh * p.N + i) * p.S + j];
          if (P == 0) continue;
          const double* vj = V + (bg * p.S + j) * p.Dv;
          const double* kj = K + (bg * p.S + j) * p.D;
          double dP = 0, absdP = 0;
          for (int64_t e = 0; e < p.Dv; ++e) {
            dP += dOi[e] * vj[e];
            absdP += std::fabs(dOi[e] * vj[e]);
          }
          const double dS = P * std::fabs(dP - Di) * scale, mS = P * (absdP + absDi) * scale;
          for (int64_t e = 0; e < p.Dv; ++e) {
            sv.w.data<double>()[(bg * p.S + j) * p.Dv + e] += P * std::fabs(dOi[e]);
            sv.m.data<double>()[(bg * p.S + j) * p.Dv + e] += P * std::fabs(dOi[e]);
          }
          for (int64_t d = 0; d < p.D; ++d) {
            sk.w.data<double>()[(bg * p.S + j) * p.D + d] += dS * std::fabs(qi[d]);
            sk.m.data<double>()[(bg * p.S + j) * p.D + d] += mS * std::fabs(qi[d]);
            sq.w.data<double>()[(bh * p.N + i) * p.D + d] += dS * std::fabs(kj[d]);
            sq.m.data<double>()[(bh * p.N + i) * p.D + d] += mS * std::fabs(kj[d]);
          }
        }
      }
    }
  return {sq, sk, sv};
}

// The second rule, element by element.
void expect_within_rounding(const AttentionGrads& got, const AttentionGrads& plain,
                            const Bf16Case& b) {
  const auto [sq, sk, sv] = spreads(b);
  for (const auto& [name, g, pl, t, s] :
       {std::tuple{"dq", &got.dq, &plain.dq, &b.truth.dq, &sq},
        std::tuple{"dk", &got.dk, &plain.dk, &b.truth.dk, &sk},
        std::tuple{"dv", &got.dv, &plain.dv, &b.truth.dv, &sv}}) {
    int bad = 0;
    for (int64_t x = 0; x < t->numel() && bad < 5; ++x) {
      const double truth = t->get(x);
      const double tol = 0x1p-7 * s->w.get(x) + 2 * std::fabs(pl->get(x) - truth) +
                         0x1p-21 * s->m.get(x) + 1e-30;
      if (!(std::fabs(g->get(x) - truth) <= tol)) {
        ADD_FAILURE() << name << " element " << x << ": got " << g->get(x) << ", truth " << truth
                      << ", allowed +-" << tol << " (rounded terms " << s->w.get(x) << ")";
        ++bad;
      }
    }
  }
}

class Bf16Backward : public qkv::test::OnIsa {
 protected:
  bool rounds() const { return GetParam() >= Isa::avx512bf16; }
};

std::vector<Case> cases() {
  std::vector<Case> cs = edge_cases();
  for (uint64_t seed = 0; seed < 36; ++seed) cs.push_back(random_case(seed));
  return cs;
}

TEST_P(Bf16Backward, ErrorRule) {
  int differ = 0;  // cases whose gradients are not the widening path's bits
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const Bf16Case b = prepare(c);
    const AttentionGrads got = run(b, Kernel::fast), plain = widened(b);
    ASSERT_EQ(got.dq.dtype(), DType::f32);
    if (rounds()) {
      expect_within_rounding(got, plain, b);
    } else {
      EXPECT_TRUE(same_bits(got.dq, plain.dq));
      EXPECT_TRUE(same_bits(got.dk, plain.dk));
      EXPECT_TRUE(same_bits(got.dv, plain.dv));
    }
    differ += !same_bits(got.dq, plain.dq) || !same_bits(got.dk, plain.dk) ||
              !same_bits(got.dv, plain.dv);
  }
  // The vdpbf16ps paths must really have run their own kernel (a fallback
  // to the widening path would meet the rule above too).
  if (rounds()) {
    EXPECT_GT(differ, static_cast<int>(cases().size()) / 2);
  }
}

// A bf16 out is read as its values: the gradients are the bits of the same
// out widened to float32 (D_i = dout_i · out_i is summed in double either
// way), on every path.
TEST_P(Bf16Backward, Bf16OutIsReadAsItsValues) {
  for (const Case& c : edge_cases()) {
    SCOPED_TRACE(describe(c));
    const Bf16Case b = prepare(c);
    AttentionOptions o = b.opts;
    o.kernel = Kernel::fast;
    o.out_dtype = DType::f32;
    const Tensor out16 = b.fwd.out.to(DType::bf16), lse = b.fwd.lse.to(DType::f32);
    AttentionGrads g16, g32;
    attention_backward_into(g16, b.q, b.k, b.v, out16, lse, b.dout, o);
    attention_backward_into(g32, b.q, b.k, b.v, out16.to(DType::f32), lse, b.dout, o);
    EXPECT_TRUE(same_bits(g16.dq, g32.dq));
    EXPECT_TRUE(same_bits(g16.dk, g32.dk));
    EXPECT_TRUE(same_bits(g16.dv, g32.dv));
  }
}

// q, k and v as strided views (padded rows as in a KV cache, heads and
// positions swapped in memory) give the bits of their C-ordered copies,
// read in place (no input copy).
TEST_P(Bf16Backward, StridedInputsGiveTheBitsOfContiguousOnes) {
  for (const Case& c : edge_cases()) {
    SCOPED_TRACE(describe(c));
    const Bf16Case b = prepare(c);
    const AttentionGrads want = run(b, Kernel::fast);
    for (int layout : {1, 2}) {
      auto lay = [&](const Tensor& t) {
        const int r = t.rank();
        std::vector<int> order(r);
        for (int a = 0; a < r; ++a) order[a] = a;
        if (layout == 2 && r >= 3) std::swap(order[r - 3], order[r - 2]);
        return test_strided::restride(t, order, 1);
      };
      const auto qs = lay(b.q), ks = lay(b.k), vs = lay(b.v);
      AttentionOptions o = b.opts;
      o.kernel = Kernel::fast;
      o.out_dtype = DType::f32;
      const int64_t copies = input_copies();
      AttentionGrads g;
      attention_backward_into(g, qs.view, ks.view, vs.view, b.fwd.out.to(DType::f32),
                              b.fwd.lse.to(DType::f32), b.dout, o);
      EXPECT_EQ(input_copies(), copies) << "layout " << layout << ": an input was copied";
      EXPECT_TRUE(same_bits(g.dq, want.dq)) << "layout " << layout;
      EXPECT_TRUE(same_bits(g.dk, want.dk)) << "layout " << layout;
      EXPECT_TRUE(same_bits(g.dv, want.dv)) << "layout " << layout;
    }
  }
}

// bf16 gradients are the float32 ones rounded to nearest once, on every path.
TEST_P(Bf16Backward, Bf16GradientsAreTheFloat32OnesRounded) {
  for (const Case& c : edge_cases()) {
    SCOPED_TRACE(describe(c));
    const Bf16Case b = prepare(c);
    const AttentionGrads g32 = run(b, Kernel::fast), g16 = run(b, Kernel::fast, true);
    EXPECT_TRUE(same_bits(g16.dq, g32.dq.to(DType::bf16)));
    EXPECT_TRUE(same_bits(g16.dk, g32.dk.to(DType::bf16)));
    EXPECT_TRUE(same_bits(g16.dv, g32.dv.to(DType::bf16)));
  }
}

// 1, 2 and 3 threads: with B x Hkv = 1 (three edge cases) one pass on one
// thread, two passes on more; not a bit may change.
TEST_P(Bf16Backward, ThreadCountDoesNotChangeABit) {
  for (const Case& c : edge_cases()) {
    SCOPED_TRACE(describe(c));
    const Bf16Case b = prepare(c);
    const AttentionGrads one = run(b, Kernel::fast, false, 1);
    for (int threads : {2, 3}) {
      const AttentionGrads g = run(b, Kernel::fast, false, threads);
      EXPECT_TRUE(same_bits(g.dq, one.dq)) << "dq, " << threads << " threads";
      EXPECT_TRUE(same_bits(g.dk, one.dk)) << "dk, " << threads << " threads";
      EXPECT_TRUE(same_bits(g.dv, one.dv)) << "dv, " << threads << " threads";
    }
  }
}

// Where a visible range (causal, a window's right side, key_lengths) cuts a
// tile, only the blocks some query sees some key in run; a bool mask of the
// same visibility runs every block. The blocks left out hold exact zeros,
// so the gradients must agree bit for bit (given the same out and lse).
TEST_P(Bf16Backward, VisibleRangesGiveTheBitsOfTheSameBoolMask) {
  for (const Case& c : visible_range_cases()) {
    SCOPED_TRACE(describe(c));
    Bf16Case b = prepare(c);
    const AttentionGrads ranged = run(b, Kernel::fast);
    Tensor keep;
    b.opts = as_bool_mask(c, b.opts, keep);
    const AttentionGrads masked = run(b, Kernel::fast);
    EXPECT_TRUE(same_bits(ranged.dq, masked.dq)) << "dq";
    EXPECT_TRUE(same_bits(ranged.dk, masked.dk)) << "dk";
    EXPECT_TRUE(same_bits(ranged.dv, masked.dv)) << "dv";
  }
}

// out and dout may come as float32 (the forward's out_dtype). The vdpbf16ps
// paths round a float32 dout to bf16 (their products take bf16); the
// widening paths use it as it is.
TEST_P(Bf16Backward, Float32OutAndDout) {
  std::mt19937_64 gen(21);
  const Case c = make_case("f32 dout", {2}, 4, 2, 70, 90, 24, 16, gen);
  const Bf16Case b = prepare(c);
  Tensor dout32 = c.dout;  // float32 values; bf16(dout32) == b.dout
  AttentionOptions o = b.opts;
  o.kernel = Kernel::fast;
  o.out_dtype = DType::f32;
  AttentionGrads g;
  attention_backward_into(g, b.q, b.k, b.v, b.fwd.out.to(DType::bf16), b.fwd.lse.to(DType::f32),
                          dout32, o);
  AttentionGrads g16out;
  attention_backward_into(g16out, b.q, b.k, b.v, b.fwd.out.to(DType::bf16), b.fwd.lse.to(DType::f32),
                          b.dout, o);
  if (rounds()) {
    EXPECT_TRUE(same_bits(g.dq, g16out.dq));
    EXPECT_TRUE(same_bits(g.dk, g16out.dk));
    EXPECT_TRUE(same_bits(g.dv, g16out.dv));
  } else {  // the float32 backward on float32 dout
    AttentionGrads w;
    AttentionOptions of = b.opts;
    of.kernel = Kernel::fast;
    attention_backward_into(w, b.q.to(DType::f32), b.k.to(DType::f32), b.v.to(DType::f32),
                            b.fwd.out.to(DType::bf16).to(DType::f32), b.fwd.lse.to(DType::f32),
                            dout32, of);
    EXPECT_TRUE(same_bits(g.dq, w.dq));
    EXPECT_TRUE(same_bits(g.dk, w.dk));
    EXPECT_TRUE(same_bits(g.dv, w.dv));
  }
  // A float32 dout beyond bf16's range cannot be rounded for the products:
  // an error, not Inf gradients. (The widening paths take it as it is.)
  dout32.data<float>()[7] = 3.4e38f;
  if (rounds()) {
    try {
      attention_backward_into(g, b.q, b.k, b.v, b.fwd.out.to(DType::bf16), b.fwd.lse.to(DType::f32),
                              dout32, o);
      ADD_FAILURE() << "a dout beyond bf16's range was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dout: a value of magnitude 3.4e+38 overflows bfloat16"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_P(Bf16Backward, BadInputs) {
  std::mt19937_64 gen(3);
  const Case c = make_case("bad", {}, 2, 1, 17, 20, 8, 8, gen);
  const Bf16Case b = prepare(c);
  AttentionOptions o = b.opts;
  o.kernel = Kernel::fast;
  AttentionGrads g;
  const Tensor out = b.fwd.out.to(DType::bf16), lse = b.fwd.lse.to(DType::f32);
  auto error_of = [&](const TensorView& out_, const TensorView& lse_, const TensorView& dout_) {
    try {
      attention_backward_into(g, b.q, b.k, b.v, out_, lse_, dout_, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto expect_has = [](const std::string& what, const std::string& part) {
    EXPECT_NE(what.find(part), std::string::npos) << what;
  };
  expect_has(error_of(b.fwd.out, lse, b.dout), "out: expected bfloat16 or float32");
  expect_has(error_of(out, Tensor(), b.dout), "lse: missing");
  expect_has(error_of(out, lse.to(DType::f64), b.dout), "lse: expected float32");
  expect_has(error_of(out, lse, normal({2, 17, 7}, gen, DType::bf16)), "dout: expected shape");
  Tensor nan_dout = b.dout;
  nan_dout.data<bfloat16>()[5] = bf16_from_float(NAN);
  expect_has(error_of(out, lse, nan_dout), "dout: values must be finite");
  Tensor inf_lse = lse;
  inf_lse.data<float>()[3] = INFINITY;
  expect_has(error_of(out, inf_lse, b.dout), "lse: values must be finite or -inf");
}

INSTANTIATE_TEST_SUITE_P(Isas, Bf16Backward,
                         ::testing::ValuesIn(all_isas()),
                         qkv::test::isa_test_name);

}  // namespace
