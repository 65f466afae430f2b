// The attention backward pass: the reference against finite differences, and
// the argument checks of attention_backward_into. (The fast backward against
// the reference: test_attention_backward_fast.cpp.)
//
// Gradient check: for loss L = Σ out ∘ R with a fixed random R (so dout = R),
// every entry of q, k and v is perturbed by ±h and (L(+h) - L(-h)) / 2h must
// match the reference backward to 1e-6 of the tensor's largest gradient, in
// float64 (central differences err by O(h²) ~ 1e-10 here, rounding by
// ~1e-16 · |L| / h ~ 1e-10). Small shapes, so every entry is checked.
#include <cmath>
#include <cstring>
#include <optional>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "qkv/attention.h"

using namespace qkv;
using ::testing::HasSubstr;

namespace {

Tensor normal(Shape shape, std::mt19937_64& gen, DType dt = DType::f64) {
  std::normal_distribution<double> nd;
  Tensor t(DType::f64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = nd(gen);
  return t.to(dt);
}

struct GradCase {
  std::string name;
  Tensor q, k, v;
  std::optional<Tensor> mask;
  AttentionOptions opts;
  AttentionOptions options() const {
    AttentionOptions o = opts;
    o.mask = mask ? TensorView(*mask) : TensorView();
    o.kernel = Kernel::reference;
    return o;
  }
};

GradCase grad_case(std::string name, Shape lead, int64_t Hq, int64_t Hkv, int64_t N, int64_t S,
                   int64_t D, int64_t Dv) {
  std::mt19937_64 gen(7);
  auto join = [&](std::initializer_list<int64_t> tail) {
    Shape s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  return GradCase{std::move(name), normal(join({Hq, N, D}), gen), normal(join({Hkv, S, D}), gen),
                  normal(join({Hkv, S, Dv}), gen), std::nullopt, {}};
}

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cs;
  cs.push_back(grad_case("GQA, N != S, Dv != D", {2}, 4, 2, 5, 7, 3, 4));
  GradCase c = grad_case("MQA, top-left causal, N > S", {}, 3, 1, 6, 4, 4, 2);
  c.opts.causal = Causal::top_left;
  cs.push_back(c);
  c = grad_case("bottom-right causal, N > S: two empty rows", {}, 2, 2, 6, 4, 3, 3);
  c.opts.causal = Causal::bottom_right;
  cs.push_back(c);
  c = grad_case("bottom-right causal, N < S", {2}, 2, 1, 3, 7, 2, 3);
  c.opts.causal = Causal::bottom_right;
  cs.push_back(c);
  c = grad_case("bool mask, broadcast, an empty row", {2}, 2, 1, 5, 6, 3, 2);
  Tensor bm(DType::boolean, {1, 5, 6});  // broadcast over batch and heads
  for (int64_t x = 0; x < bm.numel(); ++x) bm.data<bool>()[x] = (x * 7) % 5 != 0 && x / 6 != 2;
  c.mask = bm;
  cs.push_back(c);
  c = grad_case("additive mask with -inf, an empty row", {}, 2, 2, 4, 5, 3, 3);
  std::mt19937_64 gen(3);
  Tensor am = normal({2, 4, 5}, gen);
  for (int64_t x = 0; x < am.numel(); ++x)
    if (x % 4 == 1 || (x >= 5 && x < 10)) am.data<double>()[x] = -INFINITY;
  c.mask = am;
  cs.push_back(c);
  c = grad_case("window, key lengths, ALiBi", {3}, 2, 1, 6, 8, 3, 2);
  c.opts.causal = Causal::bottom_right;
  c.opts.window = SlidingWindow{3, 1};
  c.opts.key_lengths = {6, 0, 3};  // element 1 sees nothing
  c.opts.alibi_slopes = {0.5, 0.25};
  cs.push_back(c);
  c = grad_case("soft-cap that bites, scale, window", {}, 2, 1, 5, 6, 4, 3);
  c.opts.softcap = 1.5;
  c.opts.scale = 1.7;
  c.opts.window = SlidingWindow{-1, 2};
  c.opts.alibi_slopes = {0.3, 0.1};
  cs.push_back(c);
  return cs;
}

// Σ out ∘ R, the forward in float64.
double loss(const GradCase& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& R) {
  const Tensor out = attention(q, k, v, c.options()).out;
  double l = 0.0;
  for (int64_t x = 0; x < out.numel(); ++x) l += out.get(x) * R.get(x);
  return l;
}

}  // namespace

TEST(AttentionBackwardRef, MatchesFiniteDifferences) {
  for (const GradCase& c : grad_cases()) {
    SCOPED_TRACE(c.name);
    AttentionOptions o = c.options();
    o.return_lse = true;
    const AttentionResult fwd = attention(c.q, c.k, c.v, o);
    std::mt19937_64 gen(11);
    const Tensor R = normal(fwd.out.shape(), gen);
    AttentionGrads g;
    attention_backward_into(g, c.q, c.k, c.v, fwd.out, fwd.lse, R, o);
    ASSERT_EQ(g.dq.dtype(), DType::f64);

    constexpr double h = 1e-5;
    Tensor x[3] = {c.q, c.k, c.v};
    const Tensor* grads[3] = {&g.dq, &g.dk, &g.dv};
    const char* names[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; ++t) {
      ASSERT_EQ(grads[t]->shape(), x[t].shape()) << names[t];
      double max_grad = 0.0, max_err = 0.0;
      for (int64_t e = 0; e < x[t].numel(); ++e) {
        double& xe = x[t].data<double>()[e];
        const double saved = xe;
        xe = saved + h;
        const double up = loss(c, x[0], x[1], x[2], R);
        xe = saved - h;
        const double down = loss(c, x[0], x[1], x[2], R);
        xe = saved;
        const double numeric = (up - down) / (2 * h), analytic = grads[t]->get(e);
        max_grad = std::max(max_grad, std::fabs(analytic));
        max_err = std::max(max_err, std::fabs(numeric - analytic));
      }
      EXPECT_GT(max_grad, 1e-3) << names[t] << ": a trivial case checks nothing";
      EXPECT_LE(max_err, 1e-6 * max_grad) << names[t] << ", largest gradient " << max_grad;
    }

    // Rows that see no key pass no gradient: their dq is exactly 0.
    const int64_t D = c.q.dim(-1);
    for (int64_t row = 0; row < fwd.lse.numel(); ++row) {
      if (fwd.lse.get(row) != -INFINITY) continue;
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(g.dq.get(row * D + d), 0.0) << "row " << row;
    }
  }
}

// key_lengths = 0 hides every key of a batch element: all of its gradients
// are exactly 0 (not NaN), and the other elements are unaffected.
TEST(AttentionBackwardRef, EmptyBatchElementHasZeroGradients) {
  GradCase c = grad_case("padding", {2}, 2, 1, 4, 5, 3, 3);
  c.opts.key_lengths = {0, 5};
  AttentionOptions o = c.options();
  o.return_lse = true;
  const AttentionResult fwd = attention(c.q, c.k, c.v, o);
  std::mt19937_64 gen(5);
  const Tensor R = normal(fwd.out.shape(), gen);
  AttentionGrads g;
  attention_backward_into(g, c.q, c.k, c.v, fwd.out, fwd.lse, R, o);
  for (const Tensor* t : {&g.dq, &g.dk, &g.dv}) {
    const int64_t half = t->numel() / 2;
    for (int64_t x = 0; x < half; ++x) EXPECT_EQ(t->get(x), 0.0);
    double other = 0.0;
    for (int64_t x = half; x < t->numel(); ++x) other += std::fabs(t->get(x));
    EXPECT_GT(other, 0.0);
  }
}

namespace {

struct Inputs {
  Tensor q, k, v;
  AttentionResult fwd;
  Tensor dout;
};

Inputs inputs(DType dt) {
  std::mt19937_64 gen(2);
  Inputs in{normal({2, 4, 5, 3}, gen, dt), normal({2, 2, 6, 3}, gen, dt),
            normal({2, 2, 6, 4}, gen, dt), {}, normal({2, 4, 5, 4}, gen, dt)};
  AttentionOptions o;
  o.return_lse = true;
  in.fwd = attention(in.q, in.k, in.v, o);
  return in;
}

// The qkv::Error message of attention_backward_into on these arguments.
std::string error_of(const Inputs& in, const Tensor& out, const Tensor& lse, const Tensor& dout,
                     AttentionOptions o = {}) {
  AttentionGrads g;
  try {
    attention_backward_into(g, in.q, in.k, in.v, out, lse, dout, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(AttentionBackwardArgs, BadInputsThrowClearMessages) {
  const Inputs in = inputs(DType::f32);
  const Tensor& out = in.fwd.out;
  const Tensor& lse = in.fwd.lse;
  EXPECT_EQ(error_of(in, out, lse, Tensor(DType::f32, {2, 4, 5, 3})),
            "dout: expected shape [..., Hq, N, Dv] = [2, 4, 5, 4] (from q and v), found [2, 4, 5, 3]");
  EXPECT_EQ(error_of(in, out, lse, in.dout.to(DType::f64)),
            "dout: expected float32 (the dtype of q), found float64");
  EXPECT_EQ(error_of(in, out, Tensor(), in.dout),
            "lse: missing; expected [..., Hq, N] = [2, 4, 5] (run the forward with return_lse = true)");
  EXPECT_EQ(error_of(in, out, Tensor(DType::f32, {2, 4, 5, 1}), in.dout),
            "lse: expected shape [..., Hq, N] = [2, 4, 5] (from q and v), found [2, 4, 5, 1]");
  EXPECT_THAT(error_of(in, Tensor(DType::f32, {2, 4, 4}), lse, in.dout),
              HasSubstr("out: expected shape [..., Hq, N, Dv] = [2, 4, 5, 4]"));
  Tensor nan_dout = in.dout;
  nan_dout.data<float>()[7] = NAN;
  EXPECT_EQ(error_of(in, out, lse, nan_dout), "dout: values must be finite, found NaN at [0, 0, 1, 3]");
  Tensor bad_lse = lse;
  bad_lse.data<float>()[2] = INFINITY;
  EXPECT_EQ(error_of(in, out, bad_lse, in.dout),
            "lse: values must be finite or -inf, found +inf at [0, 0, 2]");
  AttentionOptions o;
  o.threads = -1;
  EXPECT_THAT(error_of(in, out, lse, in.dout, o), HasSubstr("threads"));
  // The forward's checks come first: a bad k is named as in attention().
  AttentionGrads g;
  EXPECT_THROW(attention_backward_into(g, in.q, in.q, in.v, out, lse, in.dout), Error);
}

// Fast is float32 only: asked for by name on float64 it refuses; automatic
// runs the reference, bit for bit.
TEST(AttentionBackwardArgs, Float64GoesToTheReference) {
  const Inputs in = inputs(DType::f64);
  AttentionOptions o;
  o.kernel = Kernel::fast;
  EXPECT_THAT(error_of(in, in.fwd.out, in.fwd.lse, in.dout, o), HasSubstr("float32"));
  AttentionGrads a, r;
  attention_backward_into(a, in.q, in.k, in.v, in.fwd.out, in.fwd.lse, in.dout);
  o.kernel = Kernel::reference;
  attention_backward_into(r, in.q, in.k, in.v, in.fwd.out, in.fwd.lse, in.dout, o);
  for (auto [x, y] : {std::pair{&a.dq, &r.dq}, {&a.dk, &r.dk}, {&a.dv, &r.dv}}) {
    ASSERT_EQ(x->dtype(), DType::f64);
    EXPECT_EQ(std::memcmp(x->raw(), y->raw(), x->nbytes()), 0);
  }
}

// Like attention_into: gradients of the right shape are reused, not
// reallocated (a training loop allocates nothing after its first step).
TEST(AttentionBackwardArgs, ReusesGradientTensors) {
  const Inputs in = inputs(DType::f32);
  AttentionGrads g;
  attention_backward_into(g, in.q, in.k, in.v, in.fwd.out, in.fwd.lse, in.dout);
  const void* before[3] = {g.dq.raw(), g.dk.raw(), g.dv.raw()};
  attention_backward_into(g, in.q, in.k, in.v, in.fwd.out, in.fwd.lse, in.dout);
  EXPECT_EQ(g.dq.raw(), before[0]);
  EXPECT_EQ(g.dk.raw(), before[1]);
  EXPECT_EQ(g.dv.raw(), before[2]);
  EXPECT_EQ(g.dq.shape(), in.q.shape());
  EXPECT_EQ(g.dv.shape(), in.v.shape());
}
