// The attention op on strided views: a KV-cache slice, heads-interleaved
// ([B, N, H, D] transposed), Fortran-ordered inputs and broadcast masks given
// with 0 strides must give the very results of the same values passed as
// C-ordered Tensors: bitwise for the fast kernel on every SIMD path (the
// same arithmetic on the same values, only the addresses differ) and for the
// reference. A slice whose last dim is contiguous is read in place: the op
// copies nothing (counted by input_copies()); only a strided last dim is
// copied, once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "isa_fixture.h"

#include "core/ops/attention_backends.h"
#include "core/ops/attention_checks.h"
#include "core/ops/attention_operands.h"
#include "qkv/attention.h"
#include "qkv/runtime.h"
#include "random_inputs.h"
#include "strided.h"

namespace qkv {
}  // namespace qkv

using namespace qkv;
using namespace qkv::test_inputs;
using namespace qkv::test_strided;
using ::testing::HasSubstr;

namespace {

class Views : public qkv::test::OnIsa {};

struct Inputs {
  Tensor q, k, v, dout;
};

// B = 2, Hq = 4, Hkv = 2 (GQA), D = 24, Dv = 16.
Inputs inputs(int64_t N, int64_t S, uint64_t seed) {
  std::mt19937_64 gen(seed);
  return {normal({2, 4, N, 24}, gen), normal({2, 2, S, 24}, gen), normal({2, 2, S, 16}, gen),
          normal({2, 4, N, 16}, gen)};
}

// Forward (out, lse) and backward (dq, dk, dv) of both argument sets, with
// the same options, must agree bitwise.
void expect_same(const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& dout, const Inputs& c, const AttentionOptions& base,
                 const AttentionOptions& strided_opts, Kernel kernel) {
  AttentionOptions a = base, b = strided_opts;
  a.kernel = b.kernel = kernel;
  a.return_lse = b.return_lse = true;
  a.return_weights = b.return_weights = true;
  const AttentionResult want = attention(c.q, c.k, c.v, a);
  const AttentionResult got = attention(q, k, v, b);
  EXPECT_TRUE(same_bits(got.out, want.out)) << "out, kernel " << kernel_name(kernel);
  EXPECT_TRUE(same_bits(got.lse, want.lse)) << "lse";
  EXPECT_TRUE(same_bits(got.weights, want.weights)) << "weights";
  AttentionGrads gw, gg;
  attention_backward_into(gw, c.q, c.k, c.v, want.out, want.lse, c.dout, a);
  attention_backward_into(gg, q, k, v, got.out, got.lse, dout, b);
  EXPECT_TRUE(same_bits(gg.dq, gw.dq)) << "dq, kernel " << kernel_name(kernel);
  EXPECT_TRUE(same_bits(gg.dk, gw.dk)) << "dk";
  EXPECT_TRUE(same_bits(gg.dv, gw.dv)) << "dv";
}

// Decode (N = 3: the split-KV path) and prefill (N = 70: two query tiles)
// against a KV cache of Smax = 150 keys of which len = 129 are filled.
TEST_P(Views, KvCacheSliceIsReadInPlace) {
  for (int64_t N : {3, 70}) {
    const int64_t len = 129, smax = 150;
    const Inputs c = inputs(N, len, 1 + N);
    std::mt19937_64 gen(9);
    Tensor kc = normal({2, 2, smax, 24}, gen), vc = normal({2, 2, smax, 16}, gen);
    // Copy the live keys into the cache; the rest is NaN, which the finite
    // check must not see and the kernels must not read.
    for (Tensor* t : {&kc, &vc}) {
      const Tensor& src = t == &kc ? c.k : c.v;
      const int64_t E = t->dim(-1);
      for (int64_t bg = 0; bg < 4; ++bg)
        for (int64_t j = 0; j < smax; ++j)
          for (int64_t e = 0; e < E; ++e)
            t->data<float>()[(bg * smax + j) * E + e] =
                j < len ? src.data<float>()[(bg * len + j) * E + e] : NAN;
    }
    const TensorView k = TensorView(kc).slice(-2, 0, len), v = TensorView(vc).slice(-2, 0, len);
    for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
      AttentionOptions o;
      o.causal = causal;
      const int64_t copies = input_copies();
      expect_same(c.q, k, v, c.dout, c, o, o, Kernel::fast);
      expect_same(c.q, k, v, c.dout, c, o, o, Kernel::reference);
      EXPECT_EQ(input_copies(), copies) << "a KV-cache slice must not be copied";
    }
    // The kernels address the caller's memory: k's (b=1, g=1) head starts
    // 3 * Smax rows into the cache.
    const AttentionProblem p = check_attention_args(c.q, k, v, {});
    EXPECT_EQ(p.k.head<float>(3), kc.data<float>() + 3 * smax * 24);
    EXPECT_EQ(p.k.row_stride, 24);
    EXPECT_EQ(p.v.data, vc.raw());
  }
}

// q, k, v stored [B, N, H, D] (the layout a fused QKV projection leaves),
// viewed as [B, H, N, D]: rows H·D apart, no copy.
TEST_P(Views, TransposedHeadsAreReadInPlace) {
  const Inputs c = inputs(67, 90, 2);
  const Strided q = restride(c.q, {0, 2, 1, 3}), k = restride(c.k, {0, 2, 1, 3});
  const Strided v = restride(c.v, {0, 2, 1, 3}), dout = restride(c.dout, {0, 2, 1, 3});
  AttentionOptions o;
  o.causal = Causal::bottom_right;
  const int64_t copies = input_copies();
  expect_same(q.view, k.view, v.view, dout.view, c, o, o, Kernel::fast);
  // One copy: dout, which the backward reads C-ordered; q, k, v none.
  EXPECT_EQ(input_copies(), copies + 1);
  expect_same(q.view, k.view, v.view, dout.view, c, o, o, Kernel::reference);
}

// A Fortran-ordered array has a strided last dim: copied once per input.
TEST_P(Views, FortranOrderIsCopiedOnce) {
  const Inputs c = inputs(20, 33, 3);
  const Strided q = fortran(c.q), k = fortran(c.k), v = fortran(c.v), dout = fortran(c.dout);
  AttentionOptions o;
  o.causal = Causal::top_left;
  const int64_t before = input_copies();
  AttentionResult r = attention(q.view, k.view, v.view, o);
  EXPECT_EQ(input_copies(), before + 3);
  expect_same(q.view, k.view, v.view, dout.view, c, o, o, Kernel::fast);
  expect_same(q.view, k.view, v.view, dout.view, c, o, o, Kernel::reference);
}

// A mask given once as [N, S] and broadcast over [B, Hq] by 0 strides (and
// transposed in memory) acts as the same mask expanded into a Tensor.
TEST_P(Views, BroadcastMasksAsViews) {
  const int64_t N = 40, S = 75;
  const Inputs c = inputs(N, S, 4);
  std::mt19937_64 gen(5);
  for (int kind : {1, 2, 3}) {
    const Tensor m = *random_mask(kind, {}, 1, N, S, gen);  // [1, N, S]
    Tensor full(m.dtype(), {2, 4, N, S});
    const int64_t item = static_cast<int64_t>(dtype_size(m.dtype()));
    for (int64_t x = 0; x < full.numel(); ++x)
      std::memcpy(full.raw() + x * item, m.raw() + (x % (N * S)) * item, item);
    const Tensor ns = m.reshaped({N, S});
    const Strided st = restride(ns, {1, 0});  // stored [S, N]: a strided last dim
    const TensorView bcast(st.view.raw(), m.dtype(), {2, 4, N, S},
                           {0, 0, st.view.stride(0), st.view.stride(1)});
    for (Causal causal : {Causal::top_left, Causal::bottom_right}) {
      AttentionOptions a, b;
      a.causal = b.causal = causal;
      a.mask = full;
      b.mask = bcast;
      expect_same(c.q, c.k, c.v, c.dout, c, a, b, Kernel::fast);
      expect_same(c.q, c.k, c.v, c.dout, c, a, b, Kernel::reference);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, Views, ::testing::ValuesIn(all_isas()),
                         qkv::test::isa_test_name);

// float64 runs the reference through views too.
TEST(ViewsF64, ReferenceOnStridedInputs) {
  const Inputs f = inputs(9, 14, 6);
  const Inputs c{f.q.to(DType::f64), f.k.to(DType::f64), f.v.to(DType::f64), f.dout.to(DType::f64)};
  const Strided q = fortran(c.q), k = restride(c.k, {0, 2, 1, 3}), v = fortran(c.v);
  AttentionOptions o;
  o.causal = Causal::bottom_right;
  expect_same(q.view, k.view, v.view, c.dout, c, o, o, Kernel::reference);
}

// The finite check reads exactly the viewed elements, and names the index in
// the view, whatever the strides.
TEST(ViewsChecks, NonFiniteInAStridedViewIsFound) {
  const Inputs c = inputs(5, 8, 7);
  Strided k = restride(c.k, {0, 2, 1, 3});  // padding is NaN and is never read
  EXPECT_NO_THROW(attention(c.q, k.view, c.v));
  float* base = const_cast<float*>(k.view.data<float>());
  base[1 * k.view.stride(0) + 1 * k.view.stride(1) + 6 * k.view.stride(2) + 5] = INFINITY;
  try {
    attention(c.q, k.view, c.v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("k: values must be finite, found inf at [1, 1, 6, 5]"));
  }
  Strided q = fortran(c.q);
  const_cast<float*>(q.view.data<float>())[1 * q.view.stride(0) + 3 * q.view.stride(2)] = NAN;
  try {
    attention(q.view, c.k, c.v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("q: values must be finite, found NaN at [1, 0, 3, 0]"));
  }
}

// The op picks its kernel from one table: the fast path (on the active
// ISA's kernels, whichever it is) for float32, the reference for float64 or
// when asked.
TEST(BackendTable, ChoosesByKernelAndDtype) {
  const Inputs c = inputs(2, 3, 10);
  const AttentionProblem p32 = check_attention_args(c.q, c.k, c.v, {});
  EXPECT_STREQ(select_backend(Kernel::automatic, p32).name, "fast");
  EXPECT_STREQ(select_backend(Kernel::fast, p32).name, "fast");
  EXPECT_STREQ(select_backend(Kernel::reference, p32).name, "reference");
  const Tensor q64 = c.q.to(DType::f64), k64 = c.k.to(DType::f64), v64 = c.v.to(DType::f64);
  const AttentionProblem p64 = check_attention_args(q64, k64, v64, {});
  EXPECT_STREQ(select_backend(Kernel::automatic, p64).name, "reference");
  try {
    select_backend(Kernel::fast, p64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernel fast: expects float32 or bfloat16 inputs, found float64"));
  }
  for (const AttentionBackend& b : attention_backends()) {
    EXPECT_TRUE(b.supports && b.forward && b.backward) << b.name;
  }
}

TEST(ViewsChecks, MissingDataIsAnError) {
  const Inputs c = inputs(2, 3, 8);
  const TensorView null_k(nullptr, DType::f32, c.k.shape());
  try {
    attention(c.q, null_k, c.v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("k: null data"));
  }
}

}  // namespace
