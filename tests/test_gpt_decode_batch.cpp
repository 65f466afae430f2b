// test_gpt_decode_batch.cpp: decode_batch (qkv/gpt.h), several sequences'
// decode steps as one pass over the weights, each against its own cache.
//
// Each sequence is prefilled alone (prompts of different lengths, so the
// caches differ in length), then decoded greedily both ways: alone, step
// by step with decode_step, and together with decode_batch. Every row's
// logits must be the ones decode_step gives: within float rounding where
// the products' blocking may depend on the rows (float32 and bf16 GEMMs),
// bit for bit where it cannot (the quantized dots), and the greedy tokens
// the same. Then decode_batch's refusals, each leaving every cache as it
// was.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpt_test_models.h"
#include "model/gpt_work.h"
#include "qkv/error.h"
#include "expect_error.h"
#include "qkv/gpt.h"

using ::testing::HasSubstr;

namespace qkv {
namespace {

// Llama's block (RMSNorm, SwiGLU, RoPE, GQA, an untied head), wide enough
// for the quantized blocks of 32.
GPTConfig llama_like(int64_t kv_heads) {
  GPTConfig c = tiny(true, kv_heads, false);
  c.vocab = 40;
  c.context = 32;
  c.embd = 64;
  c.rms_norm = c.swiglu = true;
  c.ffn = 96;
  c.tied_head = false;
  return c;
}

// GPT-2's block: learned positions (each sequence reads its own rows of
// wpe), LayerNorm, GELU, biases.
GPTConfig gpt2_like() {
  GPTConfig c = tiny(false, 4, true);
  c.vocab = 40;
  c.context = 32;
  return c;
}

template <class T>
int32_t argmax(std::span<const T> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Prompts of lengths 1 .. 7, one per sequence, and their caches prefilled
// alone (decode() with B = 1).
std::vector<int32_t> prompt_of(int64_t s, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t t = 0; t <= (2 * s + 1) % 7; ++t) p.push_back(static_cast<int32_t>((7 * s + 3 * t + 1) % vocab));
  return p;
}

// Decodes `seqs` sequences `steps` tokens greedily, alone and batched, and
// compares each step's logits: |batched - alone| <= tol * the largest
// |logit| (tol 0: the same bits).
template <class T>
void expect_batch_matches_alone(BasicGPT<T>& m, int64_t seqs, int64_t steps, double tol) {
  const int64_t V = m.config().vocab;
  std::vector<std::vector<std::vector<T>>> alone(static_cast<size_t>(seqs));  // [seq][step][V]
  std::vector<std::vector<int32_t>> next(static_cast<size_t>(seqs));          // [seq][step]
  for (int64_t s = 0; s < seqs; ++s) {
    const std::vector<int32_t> p = prompt_of(s, V);
    KVCache cache = m.new_cache();
    std::span<const T> l = m.decode(p.data(), static_cast<int64_t>(p.size()), cache);
    for (int64_t i = 0; i < steps; ++i) {
      next[s].push_back(argmax(l));
      l = m.decode_step(next[s].back(), cache);
      alone[s].emplace_back(l.begin(), l.end());
    }
  }
  std::vector<KVCache> caches;
  std::vector<int32_t> tokens(static_cast<size_t>(seqs));
  for (int64_t s = 0; s < seqs; ++s) {
    const std::vector<int32_t> p = prompt_of(s, V);
    caches.push_back(m.new_cache());
    tokens[s] = argmax(m.decode(p.data(), static_cast<int64_t>(p.size()), caches.back()));
  }
  std::vector<KVCache*> ptrs;
  for (KVCache& c : caches) ptrs.push_back(&c);
  for (int64_t i = 0; i < steps; ++i) {
    for (int64_t s = 0; s < seqs; ++s) ASSERT_EQ(tokens[s], next[s][i]) << "sequence " << s << ", step " << i;
    const std::span<const T> l = m.decode_batch(tokens, ptrs);
    ASSERT_EQ(static_cast<int64_t>(l.size()), seqs * V);
    for (int64_t s = 0; s < seqs; ++s) {
      const std::vector<T>& want = alone[s][i];
      const std::span<const T> got = l.subspan(s * V, V);
      double scale = 0.0;
      for (T x : want) scale = std::max(scale, std::abs(static_cast<double>(x)));
      for (int64_t v = 0; v < V; ++v) {
        if (tol == 0.0) ASSERT_EQ(got[v], want[v]) << "sequence " << s << " of " << seqs << ", step " << i << ", logit " << v;
        else ASSERT_NEAR(got[v], want[v], tol * scale) << "sequence " << s << " of " << seqs << ", step " << i << ", logit " << v;
      }
      tokens[s] = argmax(got);
      EXPECT_EQ(caches[s].len(), static_cast<int64_t>(prompt_of(s, V).size()) + i + 1);
    }
  }
}

TEST(GptDecodeBatch, EachRowIsItsSequenceAlone) {
  for (int64_t kv : {4, 2, 1}) {
    SCOPED_TRACE("llama, kv_heads " + std::to_string(kv));
    GPT m(llama_like(kv));
    randomize(m, 5);
    expect_batch_matches_alone(m, 5, 6, 1e-5);
    BasicGPT<double> m64(llama_like(kv));
    randomize(m64, 5);
    expect_batch_matches_alone(m64, 3, 4, 1e-12);
  }
  SCOPED_TRACE("gpt-2");
  GPT gpt2(gpt2_like());
  randomize(gpt2, 6);
  expect_batch_matches_alone(gpt2, 5, 6, 1e-5);
}

TEST(GptDecodeBatch, OneSequenceIsDecodeStep) {
  GPT m(llama_like(2));
  randomize(m, 7);
  expect_batch_matches_alone(m, 1, 5, 0.0);
}

// bf16 compute: bf16 caches, each row's attention the bf16 kernel on its own.
TEST(GptDecodeBatch, Bf16CachesMatchAlone) {
  GPT m(llama_like(2));
  randomize(m, 8);
  m.set_compute_dtype(DType::bf16);
  expect_batch_matches_alone(m, 4, 5, 1e-3);
}

// A quantized model's products under 16 rows are dots of whole blocks,
// each output the same operations whatever rows are beside it: the same
// bits. From 16 rows the weights go by panels (linalg/quant_panel.h),
// which add a block's terms in another order: within float32 rounding.
TEST(GptDecodeBatch, QuantizedRowsAreTheSameBits) {
  for (const WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
    SCOPED_TRACE(weight_type_info(type).name);
    GPT m(llama_like(2));
    randomize(m, 9);
    GptLoader::quantize_matrices(m, type);
    expect_batch_matches_alone(m, 3, 4, 0.0);
    expect_batch_matches_alone(m, 15, 2, 0.0);
    expect_batch_matches_alone(m, 17, 2, 1e-5);
  }
}

TEST(GptDecodeBatch, RefusalsLeaveEveryCacheAsItWas) {
  GPTConfig cfg = llama_like(2);
  cfg.context = 4;
  GPT m(cfg);
  randomize(m, 10);
  KVCache a = m.new_cache(), b = m.new_cache(), full = m.new_cache(), half = m.new_cache(DType::bf16);
  const std::vector<int32_t> p = {1, 2, 3, 4};
  m.decode(p.data(), 1, a);
  m.decode(p.data(), 2, b);
  m.decode(p.data(), 4, full);
  const std::vector<int32_t> two = {5, 6};
  std::vector<KVCache*> ab = {&a, &b};
  expect_error([&] { m.decode_batch(std::vector<int32_t>{5}, ab); }, "decode_batch: 1 tokens for 2 caches");
  expect_error([&] { m.decode_batch({}, {}); }, "decode_batch: no sequences");
  expect_error([&] { m.decode_batch(two, std::vector<KVCache*>{&a, &a}); },
               "sequence 1: its cache is also sequence 0's");
  expect_error([&] { m.decode_batch(two, std::vector<KVCache*>{&a, nullptr}); }, "sequence 1: no cache");
  expect_error([&] { m.decode_batch(two, std::vector<KVCache*>{&a, &half}); },
               "sequence 1: a bfloat16 cache beside sequence 0's float32");
  expect_error([&] { m.decode_batch(two, std::vector<KVCache*>{&a, &full}); }, "sequence 1: kv cache: full");
  expect_error([&] { m.decode_batch(std::vector<int32_t>{5, 40}, ab); }, "token id 40 outside the vocabulary");
  KVCache other = GPT(llama_like(1)).new_cache();
  expect_error([&] { m.decode_batch(two, std::vector<KVCache*>{&a, &other}); }, "sequence 1: kv cache: made for a model");
  EXPECT_EQ(a.len(), 1);
  EXPECT_EQ(b.len(), 2);
  EXPECT_EQ(full.len(), 4);
  // And the caches still decode: the batch's rows are their steps alone.
  KVCache a1 = m.new_cache(), b1 = m.new_cache();
  m.decode(p.data(), 1, a1);
  m.decode(p.data(), 2, b1);
  std::span<const float> l = m.decode_step(5, a1);
  const std::vector<float> want_a(l.begin(), l.end());
  l = m.decode_step(6, b1);
  const std::vector<float> want_b(l.begin(), l.end());
  l = m.decode_batch(two, ab);
  for (int64_t v = 0; v < cfg.vocab; ++v) {
    EXPECT_NEAR(l[v], want_a[v], 1e-4) << v;
    EXPECT_NEAR(l[cfg.vocab + v], want_b[v], 1e-4) << v;
  }
  EXPECT_EQ(a.len(), 2);
  EXPECT_EQ(b.len(), 3);
}

}  // namespace
}  // namespace qkv
