// test_gpt_grad.cpp: the assembled GPT, checked end to end (qkv/gpt.h).
//
// Per-layer gradient checks (test_nn.cpp) cannot see a wrong wiring between
// layers: a gradient sent to the wrong head, a RoPE turned the wrong way on
// the way back, a GQA group summed into the wrong key/value head. So:
//
// 1. BasicGPT<double>::backward against central finite differences of its
//    own loss, for every parameter tensor (all entries of small ones, a fixed
//    sample of large ones), RoPE on and off, Hkv = H, H/2 and 1, with and
//    without biases. In float64 the differences are good to ~1e-9, so the
//    tolerance (1e-6 relative) is tight; a test perturbs one slice of one
//    gradient by 1% and asserts the checker flags it.
// 2. The float32 model (oneDNN GEMM, the fast attention kernel) against the
//    float64 one on the same weights: the gradients agree to float32 rounding.
//    Mixed precision (bf16 compute) against the same float64 model, within
//    bf16 rounding, on the AVX512-BF16 and the widening path.
// 3. decode_step against forward: decoding a sequence token by token gives
//    forward's logits at every position, and the KV cache's checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gpt_test_models.h"
#include "expect_error.h"
#include "qkv/gpt.h"
#include "qkv/rng.h"
#include "qkv/runtime.h"
#include "test_scale.h"

using ::testing::HasSubstr;

namespace qkv {
namespace {

using GPT64 = BasicGPT<double>;

struct Batch {
  int64_t B = 2, T = 8;
  std::vector<int32_t> tokens, targets;  // [B, T]
};

Batch random_batch(int64_t vocab, uint64_t seed, int64_t T = 8) {
  NumpyGenerator rng(seed);
  Batch b;
  b.T = T;
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng.next_uint64() % static_cast<uint64_t>(vocab)));
    b.targets.push_back(static_cast<int32_t>(rng.next_uint64() % static_cast<uint64_t>(vocab)));
  }
  return b;
}

// The entries of a parameter tensor of `size` to difference: all of them up
// to kAll, else `sample` spread over the tensor (first and last included).
// 48 by default, scaled down by QKV_TEST_SCALE (sanitizer runs) to at least 8.
constexpr int64_t kAll = 64;
int64_t default_sample() { return static_cast<int64_t>(qkv_test::scaled_count(48, 8)); }

std::vector<int64_t> entries(int64_t size, int64_t sample) {
  std::vector<int64_t> idx;
  if (size <= std::max(kAll, sample)) {
    for (int64_t i = 0; i < size; ++i) idx.push_back(i);
  } else {
    for (int64_t j = 0; j < sample; ++j) idx.push_back(j * (size - 1) / (sample - 1));
  }
  return idx;
}

struct GradReport {
  int64_t checked = 0, failed = 0;
  double worst = 0.0;  // max |analytic - numeric| / (atol + rtol |numeric|): <= 1 passes
  std::string first;   // the first failing entry, for the message
};

// Central differences of m's mean loss on `batch` against `analytic` (the
// gradient at m's current weights), for the entries above of every
// parameter tensor (only those whose name contains `only`, if given; all of
// their entries if `sample` is 0). With
// h = 1e-5 on O(0.3) weights, truncation (h² L''') and rounding
// (eps · L / h) both stay near 1e-10 in float64.
GradReport check_grads(GPT64& m, const std::vector<double>& analytic, const Batch& batch,
                       const std::string& only = "", int64_t sample = -1) {
  constexpr double h = 1e-5, atol = 1e-9, rtol = 1e-7;
  GradReport r;
  const std::span<double> w = m.weights();
  for (const ParamInfo& p : m.params()) {
    if (!only.empty() && p.name.find(only) == std::string::npos) continue;
    const int64_t n = sample < 0 ? default_sample() : sample == 0 ? p.size : sample;
    for (int64_t i : entries(p.size, n)) {
      const int64_t k = p.offset + i;
      const double w0 = w[k];
      w[k] = w0 + h;
      const double up = m.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
      w[k] = w0 - h;
      const double down = m.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
      w[k] = w0;
      const double numeric = (up - down) / (2.0 * h);
      const double ratio = std::abs(analytic[k] - numeric) / (atol + rtol * std::abs(numeric));
      ++r.checked;
      r.worst = std::max(r.worst, ratio);
      if (ratio > 1.0 && r.failed++ == 0)
        r.first = p.name + "[" + std::to_string(i) + "]: analytic " +
                  std::to_string(analytic[k]) + ", numeric " + std::to_string(numeric);
    }
  }
  return r;
}

// Forward and backward at m's weights; returns the gradient.
std::vector<double> gradient(GPT64& m, const Batch& b) {
  m.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  m.backward();
  return m.grads();
}

// One parameter tensor's largest float64 gradient (its scale) and the
// largest |got - truth| over it.
struct TensorError {
  double scale = 0.0, err = 0.0;
};
TensorError tensor_error(const ParamInfo& p, const std::vector<float>& got,
                         const std::vector<double>& truth) {
  TensorError e;
  for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
    e.scale = std::max(e.scale, std::abs(truth[i]));
    e.err = std::max(e.err, std::abs(got[i] - truth[i]));
  }
  return e;
}

// The block around the attention.
enum class Block { nanogpt, llama, qwen2, post_norm };
// (RoPE, Hkv, bias, block)
using GradParam = std::tuple<bool, int64_t, bool, Block>;
class GptGrad : public ::testing::TestWithParam<GradParam> {};

// tiny(), and for Llama's block: RMSNorm, SwiGLU (F = 24), an untied head,
// rope_theta 500000 with llama3 scaling, and a sliding window shorter than
// the context; bias then means Llama's attention_bias and mlp_bias. Qwen2's
// block is Llama's with biases on q, k and v only, here with heads of 6
// (the attention 24 wide, embd 16), bias then meaning heads of 2. For
// post-norm, BERT's block (norms after each residual sum, attention in both
// directions) under a final norm and a head.
GPTConfig config_of(const GradParam& param) {
  const auto [rope, kv, bias, block] = param;
  GPTConfig c = tiny(rope, kv, bias);
  if (block == Block::post_norm) {
    c.post_norm = true;
    c.causal = false;
  }
  if (block == Block::llama || block == Block::qwen2) {
    c.rms_norm = c.swiglu = true;
    c.ffn = 24;
    c.tied_head = false;
    c.window = 5;
    c.rope_theta = 500000.0;
    c.rope_scaling = {GPTConfig::RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 4};
  }
  if (block == Block::qwen2) {
    c.bias = false;
    c.qkv_bias = true;
    c.head_size = bias ? 2 : 6;
  }
  return c;
}

std::string config_name(const ::testing::TestParamInfo<GptGrad::ParamType>& info) {
  const auto [rope, kv, bias, block] = info.param;
  return std::string(rope ? "rope" : "wpe") + "_kv" + std::to_string(kv) +
         (block == Block::qwen2 ? (bias ? "_hs2" : "_hs6") : bias ? "_bias" : "") +
         (block == Block::llama ? "_llama" : block == Block::qwen2 ? "_qwen2" : block == Block::post_norm ? "_post_norm" : "");
}

TEST_P(GptGrad, BackwardMatchesFiniteDifferencesInFloat64) {
  GPT64 m(config_of(GetParam()));
  randomize(m, 7);
  const Batch batch = random_batch(m.config().vocab, 8);
  const std::vector<double> g = gradient(m, batch);
  const GradReport r = check_grads(m, g, batch);
  EXPECT_EQ(r.failed, 0) << r.failed << " of " << r.checked << " entries; first " << r.first;
  EXPECT_GE(r.checked, static_cast<int64_t>(m.params().size()) * 8);
  RecordProperty("worst_ratio", std::to_string(r.worst));
}

TEST_P(GptGrad, Float32GradientsMatchFloat64) {
  const GPTConfig cfg = config_of(GetParam());
  GPT m32(cfg);
  GPT64 m64(cfg);
  randomize(m32, 7);
  for (int64_t i = 0; i < m32.num_params(); ++i) m64.weights()[i] = m32.weights()[i];
  const Batch b = random_batch(cfg.vocab, 8);
  const double loss32 = m32.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  const double loss64 = m64.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  EXPECT_NEAR(loss32, loss64, 1e-5 * loss64);
  m32.backward();
  m64.backward();
  // Per tensor, against its largest gradient: float32 rounding through two
  // blocks is about 1e-6 of it (measured); a wrong gradient is off by its own size.
  double worst = 0.0;
  for (const ParamInfo& p : m32.params()) {
    const auto [scale, err] = tensor_error(p, m32.grads(), m64.grads());
    EXPECT_LE(err, 2e-5 * scale) << p.name << ": scale " << scale;
    EXPECT_GT(scale, 0.0) << p.name << ": no gradient at all";
    if (scale > 0.0) worst = std::max(worst, err / scale);
  }
  RecordProperty("worst_relative", std::to_string(worst));
}

// backward() writes fresh gradients whatever grads() held: some are
// overwritten by their only producer, the rest zeroed first. Gradients left
// NaN (or from another batch) must not leak into the next step's, in
// float32, bf16 compute and float64.
TEST_P(GptGrad, BackwardIgnoresWhatGradsHeld) {
  const GPTConfig cfg = config_of(GetParam());
  const Batch b = random_batch(cfg.vocab, 8);
  auto check = [&](auto& m) {
    randomize(m, 7);
    m.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
    m.backward();
    const auto fresh = m.grads();
    std::fill(m.grads().begin(), m.grads().end(), std::numeric_limits<double>::quiet_NaN());
    m.backward();
    EXPECT_EQ(std::memcmp(m.grads().data(), fresh.data(), fresh.size() * sizeof(fresh[0])), 0);
  };
  GPT m32(cfg);
  check(m32);
  m32.set_compute_dtype(DType::bf16);
  check(m32);
  GPT64 m64(cfg);
  check(m64);
}

// Mixed precision (compute dtype bf16) against the float64 model on the same
// weights, on each ISA path this CPU has (the vdpbf16ps kernels, and the
// widening path of CPUs without AVX512-BF16). Rounding every GEMM and
// attention operand to bf16 (8 significant bits) moves the loss by ~1e-3
// of itself and each gradient by 1.2-3.5e-2 of its tensor's largest
// (measured over these configs; recorded per test). Llama's block amplifies
// it: SwiGLU multiplies two rounded products and RMSNorm has no mean to
// cancel, 3-5e-2 with both, up to 1.1e-1 in layer 0 with the window and
// RoPE scaling too (float32 compute stays within 1e-6 on every config, so
// the wiring is right). A wrong wiring is off by its own size, and
// float32 compute stays 100x closer, which the floor checks (bf16 really
// rounds).
TEST_P(GptGrad, Bf16GradientsFollowFloat64WithinBf16Rounding) {
  const GPTConfig cfg = config_of(GetParam());
  const double tol = std::get<3>(GetParam()) == Block::llama ? 2e-1 : 5e-2;
  GPT64 m64(cfg);
  GPT m16(cfg);
  randomize(m16, 7);
  for (int64_t i = 0; i < m16.num_params(); ++i) m64.weights()[i] = m16.weights()[i];
  const Batch b = random_batch(cfg.vocab, 8);
  const double loss64 = m64.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
  m64.backward();
  m16.set_compute_dtype(DType::bf16);
  const Isa saved = active_isa();
  const auto here = available_isas();
  for (Isa isa : all_isas()) {
    if (std::find(here.begin(), here.end(), isa) == here.end()) {
      std::printf("[ SKIPPED ] %s path: not on this CPU\n", isa_name(isa));
      continue;
    }
    SCOPED_TRACE(isa_name(isa));
    set_isa(isa);
    const double loss16 = m16.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
    EXPECT_NEAR(loss16, loss64, 1e-2 * loss64);
    m16.backward();
    double worst = 0.0;
    for (const ParamInfo& p : m16.params()) {
      const auto [scale, err] = tensor_error(p, m16.grads(), m64.grads());
      EXPECT_LE(err, tol * scale) << p.name << ": scale " << scale;
      if (scale > 0.0) worst = std::max(worst, err / scale);
    }
    EXPECT_GT(worst, 1e-4) << "bf16 compute as close as float32: nothing was rounded";
    RecordProperty(std::string("worst_relative_") + isa_name(isa), std::to_string(worst));
  }
  set_isa(saved);
}

// Training covers the blocks above; BERT's token types and embedding norm
// are refused by name, before any gradient is written.
TEST(GptBackward, RefusesTokenTypesAndEmbeddingNorm) {
  for (const bool types : {false, true}) {
    GPTConfig c = tiny(false, 4, true);
    c.post_norm = true;
    c.causal = false;
    if (types) c.token_types = 2;
    else c.embed_norm = true;
    GPT m(c);
    randomize(m, 3);
    const Batch b = random_batch(c.vocab, 4);
    m.forward(b.tokens.data(), b.targets.data(), b.B, b.T);
    try {
      m.backward();
      ADD_FAILURE() << "backward ran on an encoder block";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("training runs language models with a final norm and a head, "
                                      "without token types or an embedding norm"));
    }
  }
}

TEST(GptComputeDtype, RefusesWhatItCannotRun) {
  GPT m(tiny(false, 4, false));
  EXPECT_EQ(m.compute_dtype(), DType::f32);
  EXPECT_THROW(m.set_compute_dtype(DType::f64), Error);
  EXPECT_THROW(m.set_compute_dtype(DType::boolean), Error);
  GPT64 m64(tiny(false, 4, false));
  try {
    m64.set_compute_dtype(DType::bf16);
    ADD_FAILURE() << "bf16 compute on the float64 model did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("float32 model"));
  }
  m.set_compute_dtype(DType::bf16);
  EXPECT_EQ(m.compute_dtype(), DType::bf16);
}

// Under bf16 compute the forward reads the Linear weights rounded once
// (Work::weights16): weights written through weights() after a forward are
// rounded again before the next, which gives the logits of a model that had
// them from the start.
TEST(GptComputeDtype, Bf16ForwardSeesWeightsWrittenAfterIt) {
  const GPTConfig cfg = tiny(false, 4, true);
  const Batch b = random_batch(cfg.vocab, 9);
  const int64_t n = b.B * b.T * cfg.vocab;
  auto logits = [&](GPT& m) {
    m.forward(b.tokens.data(), nullptr, b.B, b.T);
    return std::vector<float>(m.logits(), m.logits() + n);
  };
  GPT m(cfg), fresh(cfg);
  m.set_compute_dtype(DType::bf16);
  fresh.set_compute_dtype(DType::bf16);
  randomize(m, 1);
  const std::vector<float> before = logits(m);
  randomize(m, 2);
  randomize(fresh, 2);
  const std::vector<float> after = logits(m), want = logits(fresh);
  EXPECT_EQ(std::memcmp(after.data(), want.data(), n * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(after.data(), before.data(), n * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Configs, GptGrad,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(4, 2, 1),
                                            ::testing::Bool(), ::testing::Values(Block::nanogpt)),
                         config_name);
INSTANTIATE_TEST_SUITE_P(Llama, GptGrad,
                         ::testing::Combine(::testing::Values(true), ::testing::Values(2, 1),
                                            ::testing::Bool(), ::testing::Values(Block::llama)),
                         config_name);
INSTANTIATE_TEST_SUITE_P(Qwen2, GptGrad,
                         ::testing::Combine(::testing::Values(true), ::testing::Values(2),
                                            ::testing::Bool(), ::testing::Values(Block::qwen2)),
                         config_name);
INSTANTIATE_TEST_SUITE_P(PostNorm, GptGrad,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(2), ::testing::Bool(),
                                            ::testing::Values(Block::post_norm)),
                         config_name);

// The suite above runs the default GELU (exact); models trained before the
// choice existed run the tanh form: the same checks on one config with it.
TEST(GptGradTanhGelu, BackwardMatchesFiniteDifferencesAndFloat32) {
  GPTConfig cfg = tiny(false, 2, true);
  cfg.gelu = nn::Gelu::tanh;
  GPT64 m(cfg);
  randomize(m, 7);
  const Batch batch = random_batch(cfg.vocab, 8);
  const GradReport r = check_grads(m, gradient(m, batch), batch);
  EXPECT_EQ(r.failed, 0) << r.failed << " of " << r.checked << " entries; first " << r.first;
  GPT m32(cfg);
  for (int64_t i = 0; i < m32.num_params(); ++i) m32.weights()[i] = static_cast<float>(m.weights()[i]);
  for (int64_t i = 0; i < m.num_params(); ++i) m.weights()[i] = m32.weights()[i];
  const double loss32 = m32.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
  const double loss64 = m.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
  EXPECT_NEAR(loss32, loss64, 1e-5 * loss64);
  // And the form matters: the same weights under the exact GELU give another loss.
  cfg.gelu = nn::Gelu::exact;
  GPT64 exact(cfg);
  std::ranges::copy(m.weights(), exact.weights().begin());
  const double loss_exact = exact.forward(batch.tokens.data(), batch.targets.data(), batch.B, batch.T);
  EXPECT_GT(std::abs(loss_exact - loss64), 1e-6 * loss64);
}

// The checker itself: a gradient wrong by 1% in one slice must fail it. The
// slice is the key heads' rows of layer 1's c_attn (a GQA-specific place),
// checked in full.
TEST(GptGradChecker, FlagsAOnePercentErrorInOneSlice) {
  const GPTConfig cfg = tiny(true, 2, false);
  GPT64 m(cfg);
  randomize(m, 7);
  const Batch batch = random_batch(cfg.vocab, 8);
  std::vector<double> g = gradient(m, batch);
  const std::string name = "transformer.h.1.attn.c_attn.weight";
  const auto it = std::find_if(m.params().begin(), m.params().end(),
                               [&](const ParamInfo& p) { return p.name == name; });
  ASSERT_NE(it, m.params().end());
  const int64_t hs = cfg.head_dim(), C = cfg.embd;
  // c_attn.weight [(H + 2 Hkv) hs, C]: rows H hs .. (H + Hkv) hs make the keys.
  const int64_t lo = it->offset + cfg.heads * hs * C, hi = lo + cfg.kv_heads * hs * C;
  EXPECT_EQ(check_grads(m, g, batch, name, 0).failed, 0);
  for (int64_t k = lo; k < hi; ++k) g[k] *= 1.01;
  const GradReport r = check_grads(m, g, batch, name, 0);
  // Every perturbed entry is off by 1% of itself, 1e5 times the tolerance,
  // unless its gradient is near 0 (then under atol): most must be flagged.
  EXPECT_GE(r.failed, (hi - lo) / 2) << "a 1% error in " << name << " went unnoticed (worst "
                                     << r.worst << ")";
  EXPECT_LE(r.failed, hi - lo) << "entries outside the perturbed slice flagged";
}

// ---- decode_step against forward --------------------------------------------

// Decoding a sequence in chunks of the given sizes (summing to the context;
// all 1: token by token) gives forward's logits at the last position of each
// chunk. tol is relative to the largest logit.
// compute: the model's compute dtype (bf16: the cache is bf16 too, as
// new_cache() makes it then).
template <class T>
void expect_decode_matches_forward(const GPTConfig& cfg, double tol,
                                   const std::vector<int64_t>& chunks, DType compute = dtype_of<T>()) {
  BasicGPT<T> m(cfg);
  randomize(m, 3);
  if (compute == DType::bf16) m.set_compute_dtype(DType::bf16);
  const Batch b = random_batch(cfg.vocab, 4, cfg.context);
  const int64_t V = cfg.vocab, Tn = cfg.context;
  m.forward(b.tokens.data(), nullptr, 1, Tn);
  const std::vector<T> want(m.logits(), m.logits() + Tn * V);
  double scale = 0.0;
  for (T x : want) scale = std::max(scale, std::abs(static_cast<double>(x)));
  KVCache cache = m.new_cache();
  EXPECT_EQ(cache.dtype(), compute);
  for (const int64_t n : chunks) {
    const int64_t last = cache.len() + n - 1;
    const std::span<const T> got = n == 1 ? m.decode_step(b.tokens[last], cache)
                                          : m.decode(b.tokens.data() + cache.len(), n, cache);
    ASSERT_EQ(static_cast<int64_t>(got.size()), V);
    EXPECT_EQ(cache.len(), last + 1);
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(got[v], want[last * V + v], tol * scale) << "position " << last << ", logit " << v;
  }
}

template <class T>
void expect_steps_match_forward(const GPTConfig& cfg, double tol) {
  expect_decode_matches_forward<T>(cfg, tol, std::vector<int64_t>(cfg.context, 1));
}

// Prefill several tokens into the cache, then one, then the rest.
template <class T>
void expect_chunks_match_forward(const GPTConfig& cfg, double tol) {
  expect_decode_matches_forward<T>(cfg, tol, {3, 1, cfg.context - 4});
}

TEST(GptDecode, ChunksMatchForward) {
  for (bool rope : {false, true})
    for (int64_t kv : {4, 1}) {
      SCOPED_TRACE(std::string(rope ? "rope" : "wpe") + " kv_heads " + std::to_string(kv));
      expect_chunks_match_forward<float>(tiny(rope, kv, false), 1e-5);
      expect_chunks_match_forward<double>(tiny(rope, kv, true), 1e-12);
    }
}

// A chunk's last block runs its projection and MLP on the last row only
// (pre-norm): Llama's block (RMSNorm, SwiGLU, biases, window) too; a causal
// post-norm block runs every row.
TEST(GptDecode, ChunksMatchForwardForEveryBlock) {
  for (int64_t kv : {4, 2}) {
    SCOPED_TRACE("llama, kv_heads " + std::to_string(kv));
    const GPTConfig llama = config_of({true, kv, true, Block::llama});
    expect_chunks_match_forward<float>(llama, 1e-5);
    expect_chunks_match_forward<double>(llama, 1e-12);
  }
  GPTConfig post = tiny(false, 4, true);
  post.post_norm = true;
  SCOPED_TRACE("causal post-norm");
  expect_chunks_match_forward<float>(post, 1e-5);
  expect_chunks_match_forward<double>(post, 1e-12);
}

TEST(GptDecode, StepsMatchForward) {
  for (bool rope : {false, true})
    for (int64_t kv : {4, 2, 1}) {
      SCOPED_TRACE(std::string(rope ? "rope" : "wpe") + " kv_heads " + std::to_string(kv));
      expect_steps_match_forward<float>(tiny(rope, kv, false), 1e-5);
      expect_steps_match_forward<double>(tiny(rope, kv, true), 1e-12);
      GPTConfig tanh_cfg = tiny(rope, kv, false);
      tanh_cfg.gelu = nn::Gelu::tanh;
      expect_steps_match_forward<float>(tanh_cfg, 1e-5);
    }
}

// Under bf16 compute the cache is bf16 and attention runs the bf16 kernel
// on it, as the bf16 forward does on its rounded q, k, v: the two sum in
// different orders (and prefill rounds the weights P to bf16, decode does
// not), within a few bf16 roundings of the logits.
TEST(GptDecode, Bf16CacheMatchesTheBf16Forward) {
  for (int64_t kv : {4, 1}) {
    SCOPED_TRACE("kv_heads " + std::to_string(kv));
    const GPTConfig cfg = tiny(true, kv, false);
    expect_decode_matches_forward<float>(cfg, 4e-3, std::vector<int64_t>(cfg.context, 1), DType::bf16);
    expect_decode_matches_forward<float>(cfg, 4e-3, {3, 1, cfg.context - 4}, DType::bf16);
    const GPTConfig llama = config_of({true, kv, true, Block::llama});
    expect_decode_matches_forward<float>(llama, 4e-3, {3, 1, llama.context - 4}, DType::bf16);
  }
}

// The cache's buffers grow with the sequence (256 positions, then doubling
// up to the context), keeping what they hold: chunks that cross each
// boundary, and steps right after one, still give forward's logits, in
// float32 and in a bf16 cache.
TEST(GptDecode, GrowingCacheMatchesForward) {
  GPTConfig cfg = tiny(true, 2, false);
  cfg.context = 600;
  expect_decode_matches_forward<float>(cfg, 1e-5, {255, 1, 1, 300, 1, 41, 1});
  expect_decode_matches_forward<double>(cfg, 1e-12, {200, 357, 43});
  expect_decode_matches_forward<float>(cfg, 4e-3, {256, 1, 342, 1}, DType::bf16);
  GPT m(cfg);
  KVCache cache = m.new_cache();
  EXPECT_EQ(cache.keys(0).dim(2), 256);
  const int64_t per_position = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim() * 4;
  EXPECT_EQ(cache.nbytes(), 256 * per_position);
  for (const int64_t n : {1, 256, 257, 300, 513, 600}) {  // what a budget reads before making one
    KVCache fresh = m.new_cache();
    fresh.reserve(n);
    EXPECT_EQ(KVCache::bytes_after_reserve(cfg, DType::f32, n), fresh.nbytes()) << n;
  }
  const std::vector<int32_t> tokens(300, 1);
  m.decode(tokens.data(), 257, cache);
  EXPECT_EQ(cache.values(1).dim(2), 512);  // doubled
  m.decode(tokens.data(), 256, cache);
  EXPECT_EQ(cache.keys(1).dim(2), 600);  // up to the context
  EXPECT_EQ(cache.nbytes(), 600 * per_position);
  cache.reset();  // the buffers are kept
  EXPECT_EQ(cache.keys(0).dim(2), 600);
  // A prompt longer than one pass's rows with a bad token near its end
  // leaves the cache as it was, its first chunk run or not.
  std::vector<int32_t> bad(400, 1);
  bad[399] = static_cast<int32_t>(cfg.vocab);
  m.decode(tokens.data(), 3, cache);
  EXPECT_THROW(m.decode(bad.data(), 400, cache), Error);
  EXPECT_EQ(cache.len(), 3);
}

TEST(KVCache, FullCacheThrowsAndResetStartsOver) {
  const GPTConfig cfg = tiny(true, 2, false);
  GPT m(cfg);
  randomize(m, 5);
  KVCache cache = m.new_cache();
  EXPECT_EQ(cache.capacity(), cfg.context);
  EXPECT_EQ(cache.len(), 0);
  EXPECT_EQ(cache.keys(1).shape(), (Shape{1, cfg.kv_heads, cfg.context, cfg.head_dim()}));  // 8 < 256
  expect_error([&] { cache.values(2); }, "kv cache: layer 2 outside 0 .. 1");
  const std::span<const float> step0 = m.decode_step(3, cache);
  const std::vector<float> first(step0.begin(), step0.end());  // a copy: the span is scratch
  ASSERT_EQ(cache.len(), 1);
  while (cache.len() < cache.capacity()) m.decode_step(1, cache);
  expect_error([&] { m.decode_step(1, cache); }, "kv cache: full: all 8 positions");
  EXPECT_EQ(cache.len(), cfg.context);
  cache.reset();
  EXPECT_EQ(cache.len(), 0);
  const std::span<const float> again = m.decode_step(3, cache);
  EXPECT_TRUE(std::equal(again.begin(), again.end(), first.begin()));
  // A bad token leaves the cache as it was.
  expect_error([&] { m.decode_step(11, cache); }, "model: token id 11 outside the vocabulary");
  EXPECT_EQ(cache.len(), 1);
  // So does a chunk with a bad token after good ones, or one that does not fit.
  const std::vector<int32_t> chunk = {1, 2, 11};
  expect_error([&] { m.decode(chunk.data(), 3, cache); }, "model: token id 11 outside the vocabulary");
  EXPECT_EQ(cache.len(), 1);
  const std::vector<int32_t> many(static_cast<size_t>(cfg.context), 1);
  expect_error([&] { m.decode(many.data(), cfg.context, cache); },
               "kv cache: 8 tokens do not fit: 7 of the context's 8 positions are free");
  expect_error([&] { m.decode(many.data(), 0, cache); }, "expected at least one token");
  EXPECT_EQ(cache.len(), 1);
}

TEST(KVCache, RefusesACacheMadeForAnotherModel) {
  GPT m(tiny(false, 2, false));
  KVCache other_kv = GPT(tiny(false, 4, false)).new_cache();
  expect_error([&] { m.decode_step(0, other_kv); },
               "kv cache: made for a model with kv_heads = 4, used with one with kv_heads = 2");
  KVCache other_rope(tiny(true, 2, false));
  expect_error([&] { m.decode_step(0, other_rope); }, "rope = 1, used with one with rope = 0");
  GPTConfig longer = tiny(false, 2, false);
  longer.context = 16;
  KVCache other_ctx(longer);
  expect_error([&] { m.decode_step(0, other_ctx); }, "context = 16");
  KVCache f64(tiny(false, 2, false), DType::f64);
  expect_error([&] { m.decode_step(0, f64); }, "kv cache: holds float64, used with a float32 model");
  EXPECT_EQ(other_kv.len(), 0);
  // The same shape from another model instance is fine: the cache holds no weights.
  KVCache same(tiny(false, 2, false));
  EXPECT_NO_THROW(m.decode_step(0, same));
  expect_error([] { KVCache bad(tiny(false, 3, false)); }, "kv_heads must divide heads");
  expect_error([] { KVCache bad(tiny(false, 2, false), DType::boolean); },
               "kv cache: expected float32, bf16 or float64, found bool");
  BasicGPT<double> m64(tiny(false, 2, false));
  KVCache bf16(tiny(false, 2, false), DType::bf16);
  expect_error([&] { m64.decode_step(0, bf16); },
               "kv cache: holds bfloat16, used with a float64 model (it takes a float64 cache)");
  expect_error([&] { m.decode_step(0, f64); }, "(it takes a float32 or bf16 cache)");
}

// A bf16 cache holds the keys and values rounded to bfloat16, in half the
// bytes: under float32 compute, layer 0's (which no attention precedes) are
// the float32 cache's rounded, bit for bit, and the logits stay within
// bf16's rounding of the float32 cache's.
TEST(KVCache, Bf16HoldsTheRoundedKeysAndValues) {
  const GPTConfig cfg = tiny(true, 2, false);
  GPT m(cfg);
  randomize(m, 4);
  const Batch b = random_batch(cfg.vocab, 6);
  KVCache f32 = m.new_cache(), bf16 = m.new_cache(DType::bf16);
  ASSERT_EQ(f32.dtype(), DType::f32);
  ASSERT_EQ(bf16.dtype(), DType::bf16);
  EXPECT_EQ(f32.nbytes(), 2 * bf16.nbytes());
  EXPECT_EQ(bf16.nbytes(), 2 * cfg.layers * cfg.kv_heads * cfg.context * cfg.head_dim() * 2);
  const std::span<const float> a = m.decode(b.tokens.data(), 5, f32);
  const std::vector<float> want(a.begin(), a.end());
  const std::span<const float> got = m.decode(b.tokens.data(), 5, bf16);
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_GT(worst, 0.0) << "a bf16 cache gave float32's logits: its keys were not rounded";
  EXPECT_LT(worst, 1e-2 * scale);
  for (const bool keys : {true, false}) {
    const Tensor& x = keys ? f32.keys(0) : f32.values(0);
    const Tensor& y = keys ? bf16.keys(0) : bf16.values(0);
    for (int64_t g = 0; g < cfg.kv_heads; ++g)
      for (int64_t t = 0; t < 5; ++t)
        for (int64_t d = 0; d < cfg.head_dim(); ++d) {
          const int64_t i = (g * cfg.context + t) * cfg.head_dim() + d;
          ASSERT_EQ(y.data<bfloat16>()[i].bits, bf16_from_float(x.data<float>()[i]).bits)
              << (keys ? "key" : "value") << " of head " << g << ", position " << t;
        }
  }
}

// RoPE's frequencies divided by a factor each (a GGUF file's rope_freqs)
// are Llama 3.1's scaling when the factors are its stretches: the same
// logits, in float64, to its rounding. The factors must fit the heads.
TEST(GptRope, FactorsStretchAsLlama3) {
  GPTConfig llama3 = tiny(true, 2, false);
  llama3.embd = 32;  // heads of 8: wavelengths 2 pi 10^i, i < 4, against 64: kept, blended, stretched twice
  llama3.rope_scaling = {GPTConfig::RopeScaling::Kind::llama3, 8.0, 1.0, 4.0, 64};
  GPTConfig factors = llama3;
  factors.rope_scaling = {GPTConfig::RopeScaling::Kind::factors};
  const int64_t D = llama3.head_dim();
  for (int64_t i = 0; i < D / 2; ++i) {
    const double f = 1.0 / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(D));
    const double wavelen = 2.0 * std::numbers::pi / f, smooth = (64.0 / wavelen - 1.0) / 3.0;
    factors.rope_scaling.factors.push_back(wavelen > 64.0 ? 8.0f : wavelen < 16.0 ? 1.0f
                                                                 : static_cast<float>(1.0 / ((1.0 - smooth) / 8.0 + smooth)));
  }
  GPT64 a(llama3), b(factors);
  randomize(a, 3);
  std::copy(a.weights().begin(), a.weights().end(), b.weights().begin());
  const Batch batch = random_batch(llama3.vocab, 8);
  a.forward(batch.tokens.data(), nullptr, 1, 8);
  b.forward(batch.tokens.data(), nullptr, 1, 8);
  const std::span<const double> x(a.logits(), 8 * llama3.vocab), y(b.logits(), 8 * llama3.vocab);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-6) << i;

  factors.rope_scaling.factors.pop_back();
  expect_error([&] { GPT64 bad(factors); }, "rope_scaling: factors needs head_dim / 2 = 4 finite numbers > 0, found 3");
  factors.rope_scaling.factors.push_back(0.0f);
  expect_error([&] { GPT64 bad(factors); }, "rope_scaling: factors needs head_dim / 2 = 4");
}

}  // namespace
}  // namespace qkv
