// The GPT layers (qkv/nn.h) and the GEMM they run on (kernels/gemm.h).
//
// 1. Gradient checks: every reference backward (nn::ref, declared in
//    src/model/layers/nn_ref.h and defined beside each layer; in float64 it is
//    the layer itself) against central finite differences of its own forward.
//    RoPE and the head moves are checked in test_layers_attn.cpp, the
//    assembled model in test_gpt_grad.cpp.
// 2. The float32 layers against that reference, forward and backward, with
//    gradient buffers that already hold values (backward must ADD). Rule
//    (FlashAttention's): the float32 layer's largest error against the
//    float64 truth is at most twice that of the plain float32 loops (the same
//    reference templates run on float), plus 1e-5 of the outputs' scale.
// 3. sgemm against sgemm_ref for every transpose pair, odd sizes, padded
//    leading dimensions, alpha/beta, beta = 0 over NaN, and K = 0.
// 4. Bitwise identical results for any thread count, GEMM and layers alike.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gemm_check.h"
#include "linalg/gemm.h"
#include "model/layers/nn_ref.h"
#include "qkv/error.h"
#include "qkv/nn.h"
#include "test_scale.h"

using namespace qkv;
using linalg::sgemm;
using linalg::sgemm_ref;

namespace {

using VecF = std::vector<float>;
using VecD = std::vector<double>;

template <class T = float>
std::vector<T> random_vec(std::mt19937& rng, size_t n, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

VecD to_double(const VecF& v) { return VecD(v.begin(), v.end()); }

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int32_t V) {
  std::uniform_int_distribution<int32_t> u(0, V - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = u(rng);
  return t;
}

// ---- 1. gradient checks on the float64 reference ----------------------------

// Central differences of loss() with respect to every element of x, against
// the analytic gradient. The ops are smooth and the inputs O(1), so h = 1e-5
// leaves truncation and rounding errors near 1e-10.
void expect_grad(const char* what, VecD& x, const VecD& analytic,
                 const std::function<double()>& loss) {
  ASSERT_EQ(x.size(), analytic.size());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

double dot(const VecD& a, const VecD& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TEST(NnGradCheck, Linear) {
  std::mt19937 rng(1);
  const int64_t BT = 5, C = 7, OC = 3;
  for (bool with_bias : {true, false}) {
    VecD inp = random_vec<double>(rng, BT * C), w = random_vec<double>(rng, OC * C);
    VecD b = random_vec<double>(rng, OC), R = random_vec<double>(rng, BT * OC);
    VecD out(BT * OC);
    // loss = Σ R ⊙ out, so dout = R.
    auto loss = [&] {
      nn::ref::linear_forward(out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr,
                              BT, C, OC);
      return dot(R, out);
    };
    VecD dinp(BT * C), dw(OC * C), db(OC);
    nn::ref::linear_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(),
                             inp.data(), w.data(), BT, C, OC);
    expect_grad("dinp", inp, dinp, loss);
    expect_grad("dweight", w, dw, loss);
    if (with_bias) expect_grad("dbias", b, db, loss);
  }
}

TEST(NnGradCheck, LayerNorm) {
  std::mt19937 rng(2);
  const int64_t BT = 4, C = 9;
  VecD inp = random_vec<double>(rng, BT * C, -2.0, 3.0), w = random_vec<double>(rng, C, 0.5, 1.5);
  VecD b = random_vec<double>(rng, C), R = random_vec<double>(rng, BT * C);
  VecD out(BT * C), mean(BT), rstd(BT);
  auto loss = [&] {
    nn::ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(),
                               b.data(), BT, C);
    return dot(R, out);
  };
  loss();  // mean and rstd of the unperturbed input
  VecD dinp(BT * C), dw(C), db(C);
  nn::ref::layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(),
                              mean.data(), rstd.data(), BT, C);
  expect_grad("dinp", inp, dinp, loss);
  expect_grad("dweight", w, dw, loss);
  expect_grad("dbias", b, db, loss);
}

// RMSNorm and SwiGLU compute in double whatever T: in float64 each is its
// own reference.
TEST(NnGradCheck, RmsNorm) {
  std::mt19937 rng(12);
  const int64_t BT = 4, C = 9;
  VecD inp = random_vec<double>(rng, BT * C, -2.0, 3.0), w = random_vec<double>(rng, C, 0.5, 1.5);
  VecD R = random_vec<double>(rng, BT * C), out(BT * C), rstd(BT);
  auto loss = [&] {
    nn::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), BT, C, 1e-6);
    return dot(R, out);
  };
  loss();  // rstd of the unperturbed input
  // Gradient buffers that already hold values: backward adds.
  VecD dinp(BT * C, 0.5), dw(C, -0.25);
  nn::rmsnorm_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), rstd.data(), BT, C);
  for (double& x : dinp) x -= 0.5;
  for (double& x : dw) x += 0.25;
  expect_grad("dinp", inp, dinp, loss);
  expect_grad("dweight", w, dw, loss);
}

TEST(NnGradCheck, SwiGlu) {
  std::mt19937 rng(13);
  const int64_t BT = 3, F = 7;
  VecD inp = random_vec<double>(rng, BT * 2 * F, -4.0, 4.0), R = random_vec<double>(rng, BT * F);
  VecD out(BT * F);
  auto loss = [&] {
    nn::swiglu_forward(out.data(), inp.data(), BT, F);
    return dot(R, out);
  };
  VecD dinp(BT * 2 * F, std::numeric_limits<double>::quiet_NaN());  // written, not added
  nn::swiglu_backward(dinp.data(), inp.data(), R.data(), BT, F);
  expect_grad("dinp", inp, dinp, loss);
}

TEST(NnGradCheck, Gelu) {
  for (nn::Gelu form : {nn::Gelu::exact, nn::Gelu::tanh}) {
    SCOPED_TRACE(form == nn::Gelu::exact ? "exact" : "tanh");
    std::mt19937 rng(3);
    const int64_t N = 60;
    VecD x = random_vec<double>(rng, N, -5.0, 5.0), R = random_vec<double>(rng, N), out(N);
    auto loss = [&] {
      nn::ref::gelu_forward(out.data(), x.data(), N, form);
      return dot(R, out);
    };
    VecD dx(N);
    nn::ref::gelu_backward(dx.data(), x.data(), R.data(), N, form);
    expect_grad("dinp", x, dx, loss);
  }
}

// The two forms are different functions: at x = 1 they differ in the 4th
// digit (exact 0.8413447 = Φ(1), tanh 0.8411920), so a mix-up cannot pass.
TEST(NnGradCheck, GeluFormsDiffer) {
  const double x = 1.0;
  double exact = 0.0, tanh_form = 0.0;
  nn::ref::gelu_forward(&exact, &x, 1, nn::Gelu::exact);
  nn::ref::gelu_forward(&tanh_form, &x, 1, nn::Gelu::tanh);
  EXPECT_NEAR(exact, 0.8413447460685429, 1e-15);
  EXPECT_NEAR(tanh_form, 0.8411919906082768, 1e-15);
}

TEST(NnGradCheck, Embedding) {
  std::mt19937 rng(4);
  const int64_t B = 2, T = 3, C = 4;
  const int32_t V = 5;
  const std::vector<int32_t> tokens = {1, 3, 1, 4, 1, 0};  // token 1 three times
  VecD wte = random_vec<double>(rng, V * C), wpe = random_vec<double>(rng, T * C);
  VecD R = random_vec<double>(rng, B * T * C), out(B * T * C);
  for (bool with_pos : {true, false}) {
    auto loss = [&] {
      nn::ref::embedding_forward(out.data(), tokens.data(), wte.data(),
                                 with_pos ? wpe.data() : nullptr, B, T, C);
      return dot(R, out);
    };
    VecD dwte(V * C), dwpe(T * C);
    nn::ref::embedding_backward(dwte.data(), with_pos ? dwpe.data() : nullptr, R.data(),
                                tokens.data(), B, T, C);
    expect_grad("dwte", wte, dwte, loss);
    if (with_pos) expect_grad("dwpe", wpe, dwpe, loss);
  }
}

TEST(NnGradCheck, CrossEntropy) {
  std::mt19937 rng(5);
  const int64_t BT = 4, V = 6;
  const std::vector<int32_t> targets = {0, 5, 2, 2};
  VecD logits = random_vec<double>(rng, BT * V, -3.0, 3.0), probs(BT * V), losses(BT);
  const double dloss = 1.0 / BT;  // the mean over rows
  auto loss = [&] {
    nn::ref::crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), BT,
                                  V);
    double s = 0.0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  loss();
  VecD dlogits(BT * V);
  nn::ref::crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, BT, V);
  expect_grad("dlogits", logits, dlogits, loss);
}

// ---- 2. float32 layers against the float64 reference ------------------------

// got (float32 layer) against truth (float64 reference); plain (the reference
// loops in float32) sets the allowance.
void expect_close(const char* what, const VecF& got, const VecD& truth, const VecF& plain) {
  ASSERT_EQ(got.size(), truth.size());
  double err = 0.0, plain_err = 0.0, scale = 1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    err = std::max(err, std::abs(got[i] - truth[i]));
    plain_err = std::max(plain_err, std::abs(plain[i] - truth[i]));
    scale = std::max(scale, std::abs(truth[i]));
  }
  EXPECT_LE(err, 2.0 * plain_err + 1e-5 * scale)
      << what << ": float32 error " << err << ", plain float32 " << plain_err;
}

// Buffers for one op at three precisions: the float32 layer, the plain
// float32 loops and the float64 truth, all starting from the same values.
struct Buf {
  VecF f, plain;
  VecD d;
  explicit Buf(const VecF& init) : f(init), plain(init), d(to_double(init)) {}
  static Buf nan(size_t n) { return Buf(VecF(n, std::numeric_limits<float>::quiet_NaN())); }
};

struct Shape2 {
  int64_t BT, C, OC;
};
const Shape2 kShapes[] = {{1, 1, 1}, {3, 17, 5}, {37, 65, 19}, {96, 64, 129}, {64, 129, 3}};

TEST(NnFloat32, Linear) {
  std::mt19937 rng(11);
  for (const Shape2& s : kShapes)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("BT " + std::to_string(s.BT) + " C " + std::to_string(s.C) + " OC " +
                   std::to_string(s.OC) + (with_bias ? " bias" : " no bias"));
      const VecF inp = random_vec(rng, s.BT * s.C), w = random_vec(rng, s.OC * s.C);
      const VecF b = random_vec(rng, s.OC), dout = random_vec(rng, s.BT * s.OC);
      const VecD inp_d = to_double(inp), w_d = to_double(w), b_d = to_double(b);
      const VecD dout_d = to_double(dout);
      // Outputs start as NaN: forward must overwrite, never read.
      Buf out = Buf::nan(s.BT * s.OC);
      nn::linear_forward(out.f.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, s.BT,
                         s.C, s.OC);
      nn::ref::linear_forward(out.plain.data(), inp.data(), w.data(),
                              with_bias ? b.data() : nullptr, s.BT, s.C, s.OC);
      nn::ref::linear_forward(out.d.data(), inp_d.data(), w_d.data(),
                              with_bias ? b_d.data() : nullptr, s.BT, s.C, s.OC);
      expect_close("out", out.f, out.d, out.plain);
      // Gradients start non-zero: backward must add.
      Buf dinp(random_vec(rng, s.BT * s.C)), dw(random_vec(rng, s.OC * s.C));
      Buf db(random_vec(rng, s.OC));
      nn::linear_backward(dinp.f.data(), dw.f.data(), with_bias ? db.f.data() : nullptr,
                          dout.data(), inp.data(), w.data(), s.BT, s.C, s.OC);
      nn::ref::linear_backward(dinp.plain.data(), dw.plain.data(),
                               with_bias ? db.plain.data() : nullptr, dout.data(), inp.data(),
                               w.data(), s.BT, s.C, s.OC);
      nn::ref::linear_backward(dinp.d.data(), dw.d.data(), with_bias ? db.d.data() : nullptr,
                               dout_d.data(), inp_d.data(), w_d.data(), s.BT, s.C, s.OC);
      expect_close("dinp", dinp.f, dinp.d, dinp.plain);
      expect_close("dweight", dw.f, dw.d, dw.plain);
      expect_close("dbias", db.f, db.d, db.plain);  // untouched without a bias
      // Grad::overwrite: dinp starts NaN and must come out as dout · W alone,
      // on the GEMM path (f32 and bf16 matmul) and in the plain loops; the
      // parameter gradients still accumulate.
      const nn::Grad set = nn::Grad::overwrite;
      for (nn::Matmul mm : {nn::Matmul::f32, nn::Matmul::bf16}) {
        SCOPED_TRACE(mm == nn::Matmul::bf16 ? "overwrite, bf16 matmul" : "overwrite, f32 matmul");
        Buf dinp_set = Buf::nan(s.BT * s.C), dw_set(dw.f), db_set(db.f);
        Buf dinp_ref(VecF(s.BT * s.C, 0.0f));
        nn::linear_backward(dinp_set.f.data(), dw_set.f.data(), with_bias ? db_set.f.data() : nullptr,
                            dout.data(), inp.data(), w.data(), s.BT, s.C, s.OC, mm, set);
        nn::linear_backward(dinp_ref.f.data(), dw_set.plain.data(),
                            with_bias ? db_set.plain.data() : nullptr, dout.data(), inp.data(),
                            w.data(), s.BT, s.C, s.OC, mm);
        EXPECT_EQ(dinp_set.f, dinp_ref.f);  // = is += onto zeros, bit for bit
        EXPECT_EQ(dw_set.f, dw_set.plain);
        EXPECT_EQ(db_set.f, db_set.plain);
      }
      Buf dinp_set = Buf::nan(s.BT * s.C), dw_set(dw.f), db_set(db.f);
      nn::ref::linear_backward(dinp_set.plain.data(), dw_set.plain.data(),
                               with_bias ? db_set.plain.data() : nullptr, dout.data(), inp.data(),
                               w.data(), s.BT, s.C, s.OC, set);
      nn::ref::linear_backward(dinp_set.d.data(), dw_set.d.data(),
                               with_bias ? db_set.d.data() : nullptr, dout_d.data(), inp_d.data(),
                               w_d.data(), s.BT, s.C, s.OC, set);
      nn::linear_backward(dinp_set.f.data(), dw_set.f.data(), with_bias ? db_set.f.data() : nullptr,
                          dout.data(), inp.data(), w.data(), s.BT, s.C, s.OC, nn::Matmul::f32, set);
      expect_close("dinp (overwrite)", dinp_set.f, dinp_set.d, dinp_set.plain);
      expect_close("dweight (overwrite)", dw_set.f, dw_set.d, dw_set.plain);
      expect_close("dbias (overwrite)", db_set.f, db_set.d, db_set.plain);
      // Parameter gradients overwritten too: dweight and dbias start NaN and
      // come out bit for bit as accumulated onto zeros.
      for (nn::Matmul mm : {nn::Matmul::f32, nn::Matmul::bf16}) {
        SCOPED_TRACE(mm == nn::Matmul::bf16 ? "params overwritten, bf16" : "params overwritten, f32");
        Buf gi = Buf::nan(s.BT * s.C), gw = Buf::nan(s.OC * s.C), gb = Buf::nan(s.OC);
        VecF zi(s.BT * s.C, 0.0f), zw(s.OC * s.C, 0.0f), zb(s.OC, 0.0f);
        nn::linear_backward(gi.f.data(), gw.f.data(), with_bias ? gb.f.data() : nullptr, dout.data(),
                            inp.data(), w.data(), s.BT, s.C, s.OC, mm, set, set);
        nn::linear_backward(zi.data(), zw.data(), with_bias ? zb.data() : nullptr, dout.data(),
                            inp.data(), w.data(), s.BT, s.C, s.OC, mm);
        EXPECT_EQ(gi.f, zi);
        EXPECT_EQ(gw.f, zw);
        if (with_bias) {
          EXPECT_EQ(gb.f, zb);
        }
      }
      Buf gw = Buf::nan(s.OC * s.C), gb = Buf::nan(s.OC), gi = Buf::nan(s.BT * s.C);
      nn::ref::linear_backward(gi.d.data(), gw.d.data(), with_bias ? gb.d.data() : nullptr,
                               dout_d.data(), inp_d.data(), w_d.data(), s.BT, s.C, s.OC, set, set);
      nn::ref::linear_backward(gi.plain.data(), gw.plain.data(), with_bias ? gb.plain.data() : nullptr,
                               dout.data(), inp.data(), w.data(), s.BT, s.C, s.OC, set, set);
      nn::linear_backward(gi.f.data(), gw.f.data(), with_bias ? gb.f.data() : nullptr, dout.data(),
                          inp.data(), w.data(), s.BT, s.C, s.OC, nn::Matmul::f32, set, set);
      expect_close("dweight (params overwritten)", gw.f, gw.d, gw.plain);
      if (with_bias) expect_close("dbias (params overwritten)", gb.f, gb.d, gb.plain);
      // expect_close checks only that the float32 result is finite: the
      // plain loops' overwrite, against their accumulation onto zeros.
      VecF zw(s.OC * s.C, 0.0f), zb(s.OC, 0.0f), zi(s.BT * s.C, 0.0f);
      nn::ref::linear_backward(zi.data(), zw.data(), with_bias ? zb.data() : nullptr, dout.data(),
                               inp.data(), w.data(), s.BT, s.C, s.OC);
      EXPECT_EQ(gw.plain, zw);
      EXPECT_EQ(gi.plain, zi);
      if (with_bias) {
        EXPECT_EQ(gb.plain, zb);
      }
    }
}

// Matmul::bf16's forward: the bias goes into gemm_bf16's micro-tiles (no
// copy into out first); bitwise the bias written into out and gemm_bf16
// with beta = 1, for both weight layouts, with out starting NaN.
TEST(NnFloat32, LinearBf16ForwardBias) {
  std::mt19937 rng(14);
  for (const Shape2& s : kShapes)
    for (nn::WeightLayout layout : {nn::WeightLayout::out_in, nn::WeightLayout::in_out})
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE("BT " + std::to_string(s.BT) + " C " + std::to_string(s.C) + " OC " +
                     std::to_string(s.OC) + (layout == nn::WeightLayout::out_in ? " out_in" : " in_out") +
                     (with_bias ? " bias" : " no bias"));
        const VecF inp = random_vec(rng, s.BT * s.C), w = random_vec(rng, s.OC * s.C);
        const VecF b = random_vec(rng, s.OC);
        VecF got(s.BT * s.OC, std::numeric_limits<float>::quiet_NaN()), want(s.BT * s.OC, 0.0f);
        nn::linear_forward(got.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, s.BT, s.C,
                           s.OC, layout, nn::Matmul::bf16);
        if (with_bias)
          for (int64_t r = 0; r < s.BT; ++r) std::copy(b.begin(), b.end(), want.begin() + r * s.OC);
        const bool out_in = layout == nn::WeightLayout::out_in;
        linalg::gemm_bf16(false, out_in, s.BT, s.OC, s.C, 1.0f, inp.data(), s.C, w.data(),
                           out_in ? s.C : s.OC, 1.0f, want.data(), s.OC);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
}

// The bfloat16 forms for mixed precision: LayerNorm and GELU with a bf16
// out give the float32 forms' values rounded once; a Linear on a bf16
// input gives, forward and backward, the bits of Matmul::bf16 on the
// float32 values that input holds. Sizes around the 256-element blocks the
// rounding runs in, and one large enough to run threaded.
TEST(NnFloat32, Bf16OutputsAndInputs) {
  std::mt19937 rng(15);
  auto rounded = [](const VecF& x) {
    std::vector<bfloat16> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_from_float(x[i]);
    return r;
  };
  auto bits = [](const std::vector<bfloat16>& x) {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = x[i].bits;
    return b;
  };
  for (auto [BT, C] : {std::pair<int64_t, int64_t>{3, 7}, {5, 256}, {2, 300}, {768, 128}}) {
    SCOPED_TRACE("BT " + std::to_string(BT) + " C " + std::to_string(C));
    const VecF x = random_vec(rng, BT * C), w = random_vec(rng, C), b = random_vec(rng, C);
    for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
      VecF y(BT * C), m(BT), r(BT), m16(BT), r16(BT);
      std::vector<bfloat16> y16(BT * C);
      nn::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), bias, BT, C);
      nn::layernorm_forward(y16.data(), m16.data(), r16.data(), x.data(), w.data(), bias, BT, C);
      EXPECT_EQ(bits(y16), bits(rounded(y)));
      EXPECT_EQ(m16, m);
      EXPECT_EQ(r16, r);
    }
    for (nn::Gelu form : {nn::Gelu::exact, nn::Gelu::tanh}) {
      VecF y(BT * C);
      std::vector<bfloat16> y16(BT * C);
      nn::gelu_forward(y.data(), x.data(), BT * C, form);
      nn::gelu_forward(y16.data(), x.data(), BT * C, form);
      EXPECT_EQ(bits(y16), bits(rounded(y)));
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Shape2& s : kShapes)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("BT " + std::to_string(s.BT) + " C " + std::to_string(s.C) + " OC " +
                   std::to_string(s.OC) + (with_bias ? " bias" : " no bias"));
      const std::vector<bfloat16> inp16 = rounded(random_vec(rng, s.BT * s.C));
      VecF inp(inp16.size());  // the float32 values inp16 holds
      for (size_t i = 0; i < inp.size(); ++i) inp[i] = bf16_to_float(inp16[i]);
      const VecF w = random_vec(rng, s.OC * s.C), b = random_vec(rng, s.OC);
      const VecF dout = random_vec(rng, s.BT * s.OC);
      const float* bias = with_bias ? b.data() : nullptr;
      for (nn::WeightLayout layout : {nn::WeightLayout::out_in, nn::WeightLayout::in_out}) {
        VecF want(s.BT * s.OC, nan), got(s.BT * s.OC, nan);
        nn::linear_forward(want.data(), inp.data(), w.data(), bias, s.BT, s.C, s.OC, layout,
                           nn::Matmul::bf16);
        nn::linear_forward(got.data(), inp16.data(), w.data(), bias, s.BT, s.C, s.OC, layout);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
      for (nn::Grad mode : {nn::Grad::overwrite, nn::Grad::accumulate}) {
        const float start = mode == nn::Grad::overwrite ? nan : 0.5f;
        VecF wi(s.BT * s.C, start), ww(s.OC * s.C, start), wb(s.OC, start);
        VecF gi = wi, gw = ww, gb = wb;
        nn::linear_backward(wi.data(), ww.data(), with_bias ? wb.data() : nullptr, dout.data(),
                            inp.data(), w.data(), s.BT, s.C, s.OC, nn::Matmul::bf16, mode, mode);
        nn::linear_backward(gi.data(), gw.data(), with_bias ? gb.data() : nullptr, dout.data(),
                            inp16.data(), w.data(), s.BT, s.C, s.OC, mode, mode);
        EXPECT_EQ(std::memcmp(gi.data(), wi.data(), gi.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(gw.data(), ww.data(), gw.size() * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(gb.data(), wb.data(), gb.size() * sizeof(float)), 0);
      }
    }
}

TEST(NnFloat32, LayerNorm) {
  std::mt19937 rng(12);
  for (const Shape2& s : kShapes) {
    const int64_t BT = s.BT, C = s.C;
    SCOPED_TRACE("BT " + std::to_string(BT) + " C " + std::to_string(C));
    // An offset mean, as in a residual stream, tests the two-pass variance.
    const VecF inp = random_vec(rng, BT * C, 2.0, 5.0), w = random_vec(rng, C, 0.5, 1.5);
    const VecF b = random_vec(rng, C), dout = random_vec(rng, BT * C);
    const VecD inp_d = to_double(inp), w_d = to_double(w), b_d = to_double(b);
    const VecD dout_d = to_double(dout);
    Buf out = Buf::nan(BT * C), mean = Buf::nan(BT), rstd = Buf::nan(BT);
    nn::layernorm_forward(out.f.data(), mean.f.data(), rstd.f.data(), inp.data(), w.data(),
                          b.data(), BT, C);
    nn::ref::layernorm_forward(out.plain.data(), mean.plain.data(), rstd.plain.data(), inp.data(),
                               w.data(), b.data(), BT, C);
    nn::ref::layernorm_forward(out.d.data(), mean.d.data(), rstd.d.data(), inp_d.data(),
                               w_d.data(), b_d.data(), BT, C);
    expect_close("out", out.f, out.d, out.plain);
    expect_close("mean", mean.f, mean.d, mean.plain);
    expect_close("rstd", rstd.f, rstd.d, rstd.plain);
    // Each backward from its own precision's saved statistics.
    Buf dinp(random_vec(rng, BT * C)), dw(random_vec(rng, C)), db(random_vec(rng, C));
    nn::layernorm_backward(dinp.f.data(), dw.f.data(), db.f.data(), dout.data(), inp.data(),
                           w.data(), mean.f.data(), rstd.f.data(), BT, C);
    nn::ref::layernorm_backward(dinp.plain.data(), dw.plain.data(), db.plain.data(), dout.data(),
                                inp.data(), w.data(), mean.plain.data(), rstd.plain.data(), BT,
                                C);
    nn::ref::layernorm_backward(dinp.d.data(), dw.d.data(), db.d.data(), dout_d.data(),
                                inp_d.data(), w_d.data(), mean.d.data(), rstd.d.data(), BT, C);
    expect_close("dinp", dinp.f, dinp.d, dinp.plain);
    expect_close("dweight", dw.f, dw.d, dw.plain);
    expect_close("dbias", db.f, db.d, db.plain);
  }
}

TEST(NnFloat32, Gelu) {
  for (nn::Gelu form : {nn::Gelu::exact, nn::Gelu::tanh})
  for (int64_t N : {1, 7, 4096, 4097, 100003}) {
    std::mt19937 rng(13);
    SCOPED_TRACE(std::string(form == nn::Gelu::exact ? "exact" : "tanh") + ", N " + std::to_string(N));
    VecF x = random_vec(rng, N, -6.0, 6.0);
    if (N > 8) {  // the far tails, where exp over- and underflows
      x[0] = -20.0f; x[1] = 20.0f; x[2] = -100.0f; x[3] = 100.0f; x[4] = 0.0f; x[5] = -1e-6f;
    }
    const VecF dout = random_vec(rng, N);
    const VecD x_d = to_double(x), dout_d = to_double(dout);
    Buf out = Buf::nan(N);
    nn::gelu_forward(out.f.data(), x.data(), N, form);
    nn::ref::gelu_forward(out.plain.data(), x.data(), N, form);
    nn::ref::gelu_forward(out.d.data(), x_d.data(), N, form);
    expect_close("out", out.f, out.d, out.plain);
    Buf dx(random_vec(rng, N));
    nn::gelu_backward(dx.f.data(), x.data(), dout.data(), N, form);
    nn::ref::gelu_backward(dx.plain.data(), x.data(), dout.data(), N, form);
    nn::ref::gelu_backward(dx.d.data(), x_d.data(), dout_d.data(), N, form);
    expect_close("dinp", dx.f, dx.d, dx.plain);
    // Grad::overwrite: dinp starts NaN and comes out as gelu'(x) · dout
    // alone, bit for bit what accumulating onto zeros gives.
    const nn::Grad set = nn::Grad::overwrite;
    Buf dx_set = Buf::nan(N), dx_zero(VecF(N, 0.0f));
    nn::gelu_backward(dx_set.f.data(), x.data(), dout.data(), N, form, set);
    nn::ref::gelu_backward(dx_set.plain.data(), x.data(), dout.data(), N, form, set);
    nn::ref::gelu_backward(dx_set.d.data(), x_d.data(), dout_d.data(), N, form, set);
    expect_close("dinp (overwrite)", dx_set.f, dx_set.d, dx_set.plain);
    nn::gelu_backward(dx_zero.f.data(), x.data(), dout.data(), N, form);
    EXPECT_EQ(dx_set.f, dx_zero.f);
  }
}

TEST(NnFloat32, SwiGlu) {
  for (int64_t F : {1, 7, 16, 4097}) {
    std::mt19937 rng(17);
    SCOPED_TRACE("F " + std::to_string(F));
    const int64_t BT = 3;
    VecF inp = random_vec(rng, BT * 2 * F, -8.0, 8.0);
    if (F > 8) {  // gates in the far tails, where e^-g over- and underflows
      inp[0] = -20.0f; inp[1] = 20.0f; inp[2] = -100.0f; inp[3] = 100.0f; inp[4] = 0.0f; inp[5] = -1e-6f;
    }
    const VecD inp_d = to_double(inp);
    Buf out = Buf::nan(BT * F);
    nn::swiglu_forward(out.f.data(), inp.data(), BT, F);
    nn::ref::swiglu_forward(out.plain.data(), inp.data(), BT, F);
    nn::ref::swiglu_forward(out.d.data(), inp_d.data(), BT, F);
    expect_close("out", out.f, out.d, out.plain);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN(), inp[2] = {nan, 1.0f};
  float out = 0.0f;
  nn::swiglu_forward(&out, inp, 1, 1);
  EXPECT_TRUE(std::isnan(out));
}

TEST(NnFloat32, GeluPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (nn::Gelu form : {nn::Gelu::exact, nn::Gelu::tanh}) {
    float out = 0.0f, dinp = 0.0f, dout = 1.0f;
    nn::gelu_forward(&out, &nan, 1, form);
    nn::gelu_backward(&dinp, &nan, &dout, 1, form);
    EXPECT_TRUE(std::isnan(out));
    EXPECT_TRUE(std::isnan(dinp));
  }
}

TEST(NnFloat32, Embedding) {
  std::mt19937 rng(14);
  const int64_t B = 12, T = 64, C = 40;
  const int32_t V = 65;
  const auto tokens = random_tokens(rng, B * T, V);
  const VecF wte = random_vec(rng, V * C), wpe = random_vec(rng, T * C);
  const VecF dout = random_vec(rng, B * T * C);
  const VecD wte_d = to_double(wte), wpe_d = to_double(wpe), dout_d = to_double(dout);
  for (bool with_pos : {true, false}) {
    Buf out = Buf::nan(B * T * C);
    nn::embedding_forward(out.f.data(), tokens.data(), wte.data(), with_pos ? wpe.data() : nullptr,
                          B, T, C);
    nn::ref::embedding_forward(out.plain.data(), tokens.data(), wte.data(),
                               with_pos ? wpe.data() : nullptr, B, T, C);
    nn::ref::embedding_forward(out.d.data(), tokens.data(), wte_d.data(),
                               with_pos ? wpe_d.data() : nullptr, B, T, C);
    expect_close("out", out.f, out.d, out.plain);
    Buf dwte(random_vec(rng, V * C)), dwpe(random_vec(rng, T * C));
    nn::embedding_backward(dwte.f.data(), with_pos ? dwpe.f.data() : nullptr, dout.data(),
                           tokens.data(), B, T, C);
    nn::ref::embedding_backward(dwte.plain.data(), with_pos ? dwpe.plain.data() : nullptr,
                                dout.data(), tokens.data(), B, T, C);
    nn::ref::embedding_backward(dwte.d.data(), with_pos ? dwpe.d.data() : nullptr, dout_d.data(),
                                tokens.data(), B, T, C);
    expect_close("dwte", dwte.f, dwte.d, dwte.plain);
    expect_close("dwpe", dwpe.f, dwpe.d, dwpe.plain);
  }
}

TEST(NnFloat32, CrossEntropy) {
  std::mt19937 rng(15);
  for (int64_t V : {1, 2, 65, 300}) {
    SCOPED_TRACE("V " + std::to_string(V));
    const int64_t BT = 97;
    const auto targets = random_tokens(rng, BT, static_cast<int32_t>(V));
    VecF logits = random_vec(rng, BT * V, -8.0, 8.0);
    logits[0] = 80.0f;  // a large logit: the max must be subtracted before exp
    const VecD logits_d = to_double(logits);
    Buf losses = Buf::nan(BT), probs = Buf::nan(BT * V);
    nn::crossentropy_forward(losses.f.data(), probs.f.data(), logits.data(), targets.data(), BT,
                             V);
    nn::ref::crossentropy_forward(losses.plain.data(), probs.plain.data(), logits.data(),
                                  targets.data(), BT, V);
    nn::ref::crossentropy_forward(losses.d.data(), probs.d.data(), logits_d.data(),
                                  targets.data(), BT, V);
    expect_close("losses", losses.f, losses.d, losses.plain);
    expect_close("probs", probs.f, probs.d, probs.plain);
    const float dloss = 1.0f / BT;
    Buf dlogits(random_vec(rng, BT * V, -0.01, 0.01));
    nn::crossentropy_backward(dlogits.f.data(), probs.f.data(), targets.data(), dloss, BT, V);
    nn::ref::crossentropy_backward(dlogits.plain.data(), probs.plain.data(), targets.data(),
                                   dloss, BT, V);
    nn::ref::crossentropy_backward(dlogits.d.data(), probs.d.data(), targets.data(),
                                   static_cast<double>(dloss), BT, V);
    expect_close("dlogits", dlogits.f, dlogits.d, dlogits.plain);
  }
}

TEST(NnFloat32, CrossEntropyLossStaysFiniteWhenTargetProbabilityUnderflows) {
  const float logits[2] = {0.0f, 200.0f};  // p[0] = e^-200 rounds to 0 in float
  const int32_t target = 0;
  float loss = 0.0f, probs[2];
  nn::crossentropy_forward(&loss, probs, logits, &target, 1, 2);
  EXPECT_FLOAT_EQ(loss, 200.0f);
}

TEST(NnFloat32, ResidualInPlace) {
  std::mt19937 rng(16);
  const int64_t N = 50000;
  const VecF a = random_vec(rng, N), b = random_vec(rng, N);
  VecF out = a;
  nn::residual_forward(out.data(), out.data(), b.data(), N);  // out = out + b, as the trainer does
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
}

// ---- 3. sgemm against sgemm_ref ---------------------------------------------

// The rule and the cases' set-up: gemm_check.h.
void check_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                 int64_t pad, std::mt19937& rng) {
  test::check_gemm(sgemm, sgemm_ref, ta, tb, M, N, K, alpha, beta, pad, rng);
}

TEST(Gemm, MatchesReferenceOnOddSizesAndEveryTranspose) {
  std::mt19937 rng(21);
  const int64_t sizes[] = {1, 3, 17, 65, 129};
  const float alphas[] = {1.0f, 0.5f, -1.5f};
  const float betas[] = {0.0f, 1.0f, 0.25f};
  // Trimmed (QKV_TEST_SCALE < 1): for each transpose pair only the 25 size
  // triples with (iM + iN + iK) % 5 == 0, a Latin square in which every two
  // sizes still meet in every pair of roles.
  const bool trimmed = qkv_test::test_scale() < 1.0;
  int variant = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int iM = 0; iM < 5; ++iM)
        for (int iN = 0; iN < 5; ++iN)
          for (int iK = 0; iK < 5; ++iK) {
            if (trimmed && (iM + iN + iK) % 5 != 0) continue;
            const int64_t M = sizes[iM], N = sizes[iN], K = sizes[iK];
            // Rotate alpha, beta and padding over the cases so every size
            // meets every kind without running all combinations.
            const float alpha = alphas[variant % 3], beta = betas[(variant / 3) % 3];
            const int64_t pad = (variant / 9) % 2 ? 3 : 0;
            ++variant;
            check_sgemm(ta, tb, M, N, K, alpha, beta, pad, rng);
            if (HasFatalFailure()) return;
          }
}

TEST(Gemm, ModelShapes) {
  std::mt19937 rng(22);
  // The GPT's linear layers at B·T = 768 (forward, input and weight gradients).
  for (auto [C, OC] : {std::pair<int64_t, int64_t>{128, 384}, {512, 128}, {128, 65}}) {
    check_sgemm(false, true, 768, OC, C, 1.0f, 0.0f, 0, rng);
    check_sgemm(false, false, 768, C, OC, 1.0f, 1.0f, 0, rng);
    check_sgemm(true, false, OC, C, 768, 1.0f, 1.0f, 0, rng);
  }
}

TEST(Gemm, EmptySizes) {
  std::mt19937 rng(23);
  // K = 0: C = beta · C (oneDNN itself would leave C alone).
  check_sgemm(false, false, 5, 4, 0, 1.0f, 0.5f, 0, rng);
  check_sgemm(true, true, 5, 4, 0, 1.0f, 0.0f, 2, rng);
  // alpha = 0: same.
  check_sgemm(false, true, 6, 7, 8, 0.0f, 2.0f, 0, rng);
  // M = 0 or N = 0: nothing to do, nothing touched.
  float c = 7.0f;
  const float a = 1.0f;
  sgemm(false, false, 0, 1, 1, 1.0f, &a, 1, &a, 1, 0.0f, &c, 1);
  sgemm(false, false, 1, 0, 1, 1.0f, &a, 1, &a, 1, 0.0f, &c, 1);
  EXPECT_EQ(c, 7.0f);
}

TEST(Gemm, RejectsBadArguments) {
  float x[16] = {};
  EXPECT_THROW(sgemm(false, false, -1, 2, 2, 1.0f, x, 2, x, 2, 0.0f, x, 2), Error);
  EXPECT_THROW(sgemm(false, false, 2, 2, 3, 1.0f, x, 2, x, 2, 0.0f, x, 2), Error);  // lda < K
  EXPECT_THROW(sgemm(false, true, 2, 3, 2, 1.0f, x, 2, x, 1, 0.0f, x, 3), Error);   // ldb < K
  EXPECT_THROW(sgemm(false, false, 2, 3, 2, 1.0f, x, 2, x, 3, 0.0f, x, 2), Error);  // ldc < N
}

// ---- 4. the same bits for any thread count ----------------------------------

// Runs f at each thread count and expects every result to equal the first
// byte for byte. f fills a fresh output from the same inputs each time.
void expect_same_bits_for_any_threads(const char* what, const std::function<VecF()>& f) {
  const int saved = omp_get_max_threads();
  VecF first;
  for (int threads : {1, 2, 3, 8, 16}) {
    omp_set_num_threads(threads);
    const VecF got = f();
    if (first.empty()) {
      first = got;
      continue;
    }
    ASSERT_EQ(got.size(), first.size());
    EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0)
        << what << ": " << threads << " threads differ from 1";
  }
  omp_set_num_threads(saved);
}

TEST(NnDeterminism, SameBitsForAnyThreadCount) {
  std::mt19937 rng(31);
  const int64_t B = 12, T = 64, BT = B * T, C = 128, OC = 384, V = 65;
  const VecF x = random_vec(rng, BT * C), w = random_vec(rng, OC * C), bias = random_vec(rng, OC);
  const VecF dout = random_vec(rng, BT * OC), dx = random_vec(rng, BT * C);
  const VecF big = random_vec(rng, BT * 4 * C, -4.0, 4.0), dbig = random_vec(rng, BT * 4 * C);
  const VecF lnw = random_vec(rng, C, 0.5, 1.5);
  const auto tokens = random_tokens(rng, BT, V);
  const VecF logits = random_vec(rng, BT * V, -5.0, 5.0);

  // The weight gradients (doutᵀ · inp, K = B·T) are the GEMMs that oneDNN's
  // own threading splits along K, changing bits, from 8 threads at K = 4096
  // and from 16 at the model's K = 768 (checked with oneDNN 2.6 threading
  // itself: this test fails on it).
  struct G { int64_t M, N, K; bool ta; };
  for (const G& g : {G{128, 128, 768, true}, G{65, 128, 768, true}, G{65, 128, 4096, true},
                     G{384, 128, 768, true}, G{768, 384, 128, false}}) {
    const VecF A = random_vec(rng, g.M * g.K), Bm = random_vec(rng, g.K * g.N);
    expect_same_bits_for_any_threads("sgemm", [&] {
      VecF c(g.M * g.N, 0.5f);
      sgemm(g.ta, false, g.M, g.N, g.K, 1.0f, A.data(), g.ta ? g.M : g.K, Bm.data(), g.N, 1.0f,
            c.data(), g.N);
      return c;
    });
  }
  expect_same_bits_for_any_threads("linear", [&] {
    VecF out(BT * OC), gi(BT * C, 0.25f), gw(OC * C, 0.25f), gb(OC, 0.25f);
    nn::linear_forward(out.data(), x.data(), w.data(), bias.data(), BT, C, OC);
    nn::linear_backward(gi.data(), gw.data(), gb.data(), dout.data(), x.data(), w.data(), BT, C,
                        OC);
    out.insert(out.end(), gi.begin(), gi.end());
    out.insert(out.end(), gw.begin(), gw.end());
    out.insert(out.end(), gb.begin(), gb.end());
    return out;
  });
  expect_same_bits_for_any_threads("layernorm", [&] {
    VecF out(BT * C), mean(BT), rstd(BT), gi(BT * C), gw(C), gb(C);
    nn::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), lnw.data(),
                          bias.data(), BT, C);
    nn::layernorm_backward(gi.data(), gw.data(), gb.data(), dx.data(), x.data(), lnw.data(),
                           mean.data(), rstd.data(), BT, C);
    for (const VecF* v : {&mean, &rstd, &gi, &gw, &gb}) out.insert(out.end(), v->begin(), v->end());
    return out;
  });
  expect_same_bits_for_any_threads("rmsnorm and swiglu", [&] {
    VecF out(BT * C), rstd(BT), gi(BT * C), gw(C), act(BT * 2 * C), gact(BT * 4 * C);
    nn::rmsnorm_forward(out.data(), rstd.data(), x.data(), lnw.data(), BT, C, 1e-6);
    nn::rmsnorm_backward(gi.data(), gw.data(), dx.data(), x.data(), lnw.data(), rstd.data(), BT, C);
    nn::swiglu_forward(act.data(), big.data(), BT, 2 * C);
    nn::swiglu_backward(gact.data(), big.data(), dbig.data(), BT, 2 * C);
    for (const VecF* v : {&rstd, &gi, &gw, &act, &gact}) out.insert(out.end(), v->begin(), v->end());
    return out;
  });
  expect_same_bits_for_any_threads("gelu", [&] {
    VecF out;
    for (nn::Gelu form : {nn::Gelu::exact, nn::Gelu::tanh}) {
      VecF y(big.size()), gi(big.size());
      nn::gelu_forward(y.data(), big.data(), static_cast<int64_t>(big.size()), form);
      nn::gelu_backward(gi.data(), big.data(), dbig.data(), static_cast<int64_t>(big.size()), form);
      out.insert(out.end(), y.begin(), y.end());
      out.insert(out.end(), gi.begin(), gi.end());
    }
    return out;
  });
  expect_same_bits_for_any_threads("embedding", [&] {
    VecF out(BT * C), gte(V * C), gpe(T * C);
    nn::embedding_forward(out.data(), tokens.data(), w.data(), x.data(), B, T, C);
    nn::embedding_backward(gte.data(), gpe.data(), dx.data(), tokens.data(), B, T, C);
    out.insert(out.end(), gte.begin(), gte.end());
    out.insert(out.end(), gpe.begin(), gpe.end());
    return out;
  });
  expect_same_bits_for_any_threads("crossentropy", [&] {
    VecF losses(BT), probs(BT * V), g(BT * V);
    nn::crossentropy_forward(losses.data(), probs.data(), logits.data(), tokens.data(), BT, V);
    nn::crossentropy_backward(g.data(), probs.data(), tokens.data(), 1.0f / BT, BT, V);
    losses.insert(losses.end(), probs.begin(), probs.end());
    losses.insert(losses.end(), g.begin(), g.end());
    return losses;
  });
}

}  // namespace
