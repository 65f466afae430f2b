// The fast backward against the reference backward, on every SIMD path this
// CPU can run (scalar, AVX2, AVX-512; a path the CPU lacks is skipped).
//
// Accuracy rule (FlashAttention's, as for the forward): the truth is the
// float64 reference forward and backward on float64 copies of the float32
// inputs and dout. The fast forward + backward may err at most twice as much
// as a plain float32 forward + backward (below), plus a floor of 4 unit
// roundoffs of the magnitudes each gradient is made of. The floor is needed
// because dS = P (dP - D) cancels: where a row sees one key, dS is 0 exactly
// and the plain version, computing dP and D by the same float sum, is exact
// by luck, while any other order errs by ulps of |dP| + |D|. The truth and
// the plain version do not depend on the SIMD path, so each case computes
// them once and checks every path.
//
// Also: rows with no visible key get dq exactly 0, and results are bitwise
// identical for any thread count (which also switches the kernel between its
// one-pass and two-pass schedules).
#include <cmath>
#include <cstring>
#include <optional>

#include <gtest/gtest.h>

#include "isa_fixture.h"

#include "backward_cases.h"
#include "core/ops/attention_checks.h"
#include "qkv/attention.h"
#include "qkv/runtime.h"
#include "test_scale.h"

namespace qkv {
}  // namespace qkv

using namespace qkv;

namespace {

using namespace backward_cases;

// The plain float32 forward and backward, row by row in the textbook order
// (visibility from the checked problem as in every kernel; only the
// arithmetic is plain). Also fills `mag` with the magnitudes each gradient
// is computed from: dS = P (dP - D) cancels, so float32's error of dq and dk
// is a few ulps of Σ_j P (|dout|·|v_j| + |dout|·|out|) |k_j| (or |q_i|),
// not of the (possibly zero) gradient; dv's of Σ P |dout|.
AttentionGrads plain_float32(const Case& c, AttentionGrads& mag) {
  const AttentionOptions o = c.options(Kernel::reference);  // p points into o
  const AttentionProblem p = check_attention_args(c.q, c.k, c.v, o);
  AttentionGrads g{Tensor(DType::f32, c.q.shape()), Tensor(DType::f32, c.k.shape()),
                   Tensor(DType::f32, c.v.shape())};
  mag = AttentionGrads{Tensor(DType::f64, c.q.shape()), Tensor(DType::f64, c.k.shape()),
                       Tensor(DType::f64, c.v.shape())};
  const float *Q = c.q.data<float>(), *K = c.k.data<float>(), *V = c.v.data<float>();
  const float* dO = c.dout.data<float>();
  float *dQ = g.dq.data<float>(), *dK = g.dk.data<float>(), *dV = g.dv.data<float>();
  double *mQ = mag.dq.data<double>(), *mK = mag.dk.data<double>(), *mV = mag.dv.data<double>();
  const float scale = static_cast<float>(p.scale), cap = static_cast<float>(p.softcap);
  std::vector<float> P(p.S), dcap(p.S), out(p.Dv);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t bh = b * p.Hq + h, bg = b * p.Hkv + h / p.group;
      const float *Kg = K + bg * p.S * p.D, *Vg = V + bg * p.S * p.Dv;
      float *dKg = dK + bg * p.S * p.D, *dVg = dV + bg * p.S * p.Dv;
      double *mKg = mK + bg * p.S * p.D, *mVg = mV + bg * p.S * p.Dv;
      for (int64_t i = 0; i < p.N; ++i) {
        const int64_t row = bh * p.N + i, first = p.first_key(i), last = p.last_key(b, i);
        const float *q = Q + row * p.D, *dout = dO + row * p.Dv;
        float m = -INFINITY;
        for (int64_t j = 0; j < p.S; ++j) {
          bool visible = first <= j && j <= last;
          float bias = 0.0f;
          if (p.alibi_slopes)
            bias = -static_cast<float>((*p.alibi_slopes)[h]) * static_cast<float>(std::abs(p.diag(i) - j));
          if (p.mask.present()) {
            const int64_t at = p.mask.head_offset[bh] + i * p.mask.stride_n + j * p.mask.stride_s;
            visible = visible && !p.mask.hides(at);
            bias += static_cast<float>(p.mask.bias(at));
          }
          P[j] = -INFINITY, dcap[j] = 1.0f;
          if (!visible) continue;
          float x = 0.0f;
          for (int64_t d = 0; d < p.D; ++d) x += q[d] * Kg[j * p.D + d];
          x *= scale;
          if (cap > 0.0f) {
            const float t = std::tanh(x / cap);
            x = cap * t, dcap[j] = 1.0f - t * t;
          }
          P[j] = x + bias;
          m = std::max(m, P[j]);
        }
        if (m == -INFINITY) continue;  // no visible key: no gradient
        float sum = 0.0f, Di = 0.0f;
        for (int64_t j = 0; j < p.S; ++j) sum += std::exp(P[j] - m);
        std::fill(out.begin(), out.end(), 0.0f);
        for (int64_t j = 0; j < p.S; ++j) {
          const float w = std::exp(P[j] - m) / sum;
          for (int64_t e = 0; e < p.Dv; ++e) out[e] += w * Vg[j * p.Dv + e];
        }
        // The interface hands the backward out and a float32 lse, so any
        // float32 implementation recomputes the weights from that lse.
        const float lse = m + std::log(sum);
        for (int64_t j = 0; j < p.S; ++j) P[j] = std::exp(P[j] - lse);
        double Dabs = 0.0;
        for (int64_t e = 0; e < p.Dv; ++e) {
          Di += dout[e] * out[e];
          Dabs += std::fabs(dout[e] * out[e]);
        }
        for (int64_t j = 0; j < p.S; ++j) {
          if (P[j] == 0.0f) continue;
          float dp = 0.0f;
          double dpabs = 0.0;
          for (int64_t e = 0; e < p.Dv; ++e) {
            dp += dout[e] * Vg[j * p.Dv + e];
            dpabs += std::fabs(dout[e] * Vg[j * p.Dv + e]);
          }
          const float ds = P[j] * (dp - Di) * dcap[j] * scale;
          const double ms = P[j] * (dpabs + Dabs) * std::fabs(dcap[j] * scale);
          for (int64_t d = 0; d < p.D; ++d) {
            dQ[row * p.D + d] += ds * Kg[j * p.D + d];
            dKg[j * p.D + d] += ds * q[d];
            mQ[row * p.D + d] += ms * std::fabs(Kg[j * p.D + d]);
            mKg[j * p.D + d] += ms * std::fabs(q[d]);
          }
          for (int64_t e = 0; e < p.Dv; ++e) {
            dVg[j * p.Dv + e] += P[j] * dout[e];
            mVg[j * p.Dv + e] += P[j] * std::fabs(dout[e]);
          }
        }
      }
    }
  return g;
}

// float32's unit roundoff, 2^-24.
constexpr double kRoundoff = 0x1p-24;

// max |got - want|; infinite on NaN.
double max_err(const Tensor& got, const Tensor& want) {
  double err = 0.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = std::fabs(got.get(i) - want.get(i));
    if (std::isnan(d)) return INFINITY;
    err = std::max(err, d);
  }
  return err;
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.get(i)));
  return m;
}

AttentionGrads fast_backward(const Case& c, const AttentionOptions& o) {
  const AttentionResult f = attention(c.q, c.k, c.v, o);
  AttentionGrads g;
  attention_backward_into(g, c.q, c.k, c.v, f.out, f.lse, c.dout, o);
  return g;
}

// Checks the fast backward on c on every path in `isas` against the truth.
void check_case(const Case& c, const std::vector<Isa>& isas) {
  SCOPED_TRACE(describe(c));
  const AttentionOptions ref = c.options(Kernel::reference);
  const Tensor q = c.q.to(DType::f64), k = c.k.to(DType::f64), v = c.v.to(DType::f64);
  const AttentionResult f64 = attention(q, k, v, ref);
  AttentionGrads truth;
  attention_backward_into(truth, q, k, v, f64.out, f64.lse, c.dout.to(DType::f64), ref);
  AttentionGrads mag;
  const AttentionGrads plain = plain_float32(c, mag);
  for (Isa isa : isas) {
    set_isa(isa);
    SCOPED_TRACE(isa_name(isa));
    const AttentionGrads fast = fast_backward(c, c.options(Kernel::fast));
    for (auto [name, got, pl, want, m] : {std::tuple{"dq", &fast.dq, &plain.dq, &truth.dq, &mag.dq},
                                       {"dk", &fast.dk, &plain.dk, &truth.dk, &mag.dk},
                                       {"dv", &fast.dv, &plain.dv, &truth.dv, &mag.dv}}) {
      ASSERT_EQ(got->shape(), want->shape()) << name;
      const double err = max_err(*got, *want), plain_err = max_err(*pl, *want);
      const double floor = 4 * kRoundoff * max_abs(*m);
      EXPECT_LE(err, 2.0 * plain_err + floor) << name << ": fast error " << err
                                              << ", plain float32 error " << plain_err
                                              << ", floor " << floor;
    }
    int64_t not_zero = 0;
    const int64_t D = c.q.dim(-1);
    for (int64_t row = 0; row < f64.lse.numel(); ++row)
      if (f64.lse.get(row) == -INFINITY)
        for (int64_t d = 0; d < D; ++d) not_zero += fast.dq.get(row * D + d) != 0.0;
    EXPECT_EQ(not_zero, 0) << "dq entries of rows with no visible key that are not exactly 0";
  }
}


bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class FastBackward : public qkv::test::OnIsa {};

}  // namespace

TEST(FastBackwardAccuracy, MatchesTheReferenceOnRandomCases) {
  const Isa previous = active_isa();
  // At least 36 under QKV_TEST_SCALE: seeds 0..35 meet every mask kind with
  // every causal alignment (seed % 6, seed / 6 % 3) twice.
  const uint64_t cases = qkv_test::scaled_count(300, 36);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    check_case(random_case(seed), {available_isas().begin(), available_isas().end()});
  }
  set_isa(previous);
}

TEST_P(FastBackward, MatchesTheReferenceOnEdgeCases) {
  for (const Case& c : edge_cases()) check_case(c, {GetParam()});
}

// 1, 2 and 3 threads. With B x Hkv = 1 (three of the cases) the kernel runs
// one pass on one thread and two passes on more; not a bit may change.
TEST_P(FastBackward, ThreadCountDoesNotChangeABit) {
  for (const Case& c : edge_cases()) {
    SCOPED_TRACE(describe(c));
    AttentionOptions o = c.options(Kernel::fast);
    o.threads = 1;
    const AttentionGrads one = fast_backward(c, o);
    for (int threads : {2, 3}) {
      o.threads = threads;
      const AttentionGrads g = fast_backward(c, o);
      EXPECT_TRUE(same_bits(g.dq, one.dq)) << "dq, " << threads << " threads";
      EXPECT_TRUE(same_bits(g.dk, one.dk)) << "dk, " << threads << " threads";
      EXPECT_TRUE(same_bits(g.dv, one.dv)) << "dv, " << threads << " threads";
    }
  }
}

// Causal, a window's right side and key_lengths are visible ranges that
// start at key 0: the kernels skip the tiles past them, mask the tiles they
// cut per key row (bounds_only) and run the backward of a cut tile in
// 16 x 16 blocks, skipping blocks no query sees (edge_step). The same
// visibility as a bool mask makes every tile an element-wise one
// (mask_rows, whole tiles, every key tile visited, the same tile starts).
// Only exact zeros differ between the two, so forward and backward must
// agree bit for bit. (A window's left side moves where a row's first tile
// starts, which changes the online softmax's order: not comparable so.)
TEST_P(FastBackward, VisibleRangesGiveTheBitsOfTheSameBoolMask) {
  for (const Case& c : visible_range_cases()) {
    SCOPED_TRACE(describe(c));
    const AttentionOptions ranged = c.options(Kernel::fast);
    Tensor keep;
    const AttentionOptions masked = as_bool_mask(c, ranged, keep);
    const AttentionResult fr = attention(c.q, c.k, c.v, ranged);
    const AttentionResult fm = attention(c.q, c.k, c.v, masked);
    EXPECT_TRUE(same_bits(fr.out, fm.out)) << "out";
    EXPECT_TRUE(same_bits(fr.lse, fm.lse)) << "lse";
    AttentionGrads gr, gm;
    attention_backward_into(gr, c.q, c.k, c.v, fr.out, fr.lse, c.dout, ranged);
    attention_backward_into(gm, c.q, c.k, c.v, fm.out, fm.lse, c.dout, masked);
    EXPECT_TRUE(same_bits(gr.dq, gm.dq)) << "dq";
    EXPECT_TRUE(same_bits(gr.dk, gm.dk)) << "dk";
    EXPECT_TRUE(same_bits(gr.dv, gm.dv)) << "dv";
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FastBackward, ::testing::ValuesIn(all_isas()),
                         qkv::test::isa_test_name);
