// The model-size calculator against the published parameter counts and
// against qkv's own GPT, which counts its parameters by building them.
#include <gtest/gtest.h>

#include "qkv/gpt.h"
#include "support/model_size.h"

namespace qkv {
namespace {

ModelShape preset(const std::string& name) {
  const auto m = find_preset(name);
  EXPECT_TRUE(m.has_value()) << name;
  return *m;
}

// The model cards' (and Hugging Face's) exact totals.
TEST(ModelSize, PresetsMatchThePublishedParameterCounts) {
  EXPECT_EQ(model_size(preset("bert-base")).params, 109482240);
  EXPECT_EQ(model_size(preset("gpt2")).params, 124439808);
  EXPECT_EQ(model_size(preset("llama3-8b")).params, 8030261248);
  EXPECT_EQ(model_size(preset("llama3-70b")).params, 70553706496);
}

// The lesson's table: d_model, heads, d_head, layers.
TEST(ModelSize, PresetsHaveTheLessonsShapes) {
  struct Row { const char* name; int64_t d_model, heads, d_head, layers; };
  for (const Row& r : {Row{"bert-base", 768, 12, 64, 12}, Row{"gpt2", 768, 12, 64, 12},
                       Row{"llama3-8b", 4096, 32, 128, 32}, Row{"llama3-70b", 8192, 64, 128, 80}}) {
    const ModelShape m = preset(r.name);
    EXPECT_EQ(m.embd, r.d_model) << r.name;
    EXPECT_EQ(m.heads, r.heads) << r.name;
    EXPECT_EQ(m.head_dim(), r.d_head) << r.name;
    EXPECT_EQ(m.layers, r.layers) << r.name;
  }
}

TEST(ModelSize, KvCacheCountsKeyValueHeadsOnly) {
  const ModelSize s = model_size(preset("llama3-8b"));
  EXPECT_EQ(s.kv_elements_per_token, 2 * 32 * 8 * 128);
  EXPECT_EQ(s.kv_elements_per_token_mha, 2 * 32 * 32 * 128);  // GQA saves 4x
  const ModelSize g = model_size(preset("gpt2"));
  EXPECT_EQ(g.kv_elements_per_token, g.kv_elements_per_token_mha);
}

// GPT-2 by hand: 2 x (12 x (768 x 2304 + 768 x 768 + 2 x 768 x 3072) + 50257 x 768)
// for the products, plus 2 x 2 x 12 x context x 768 for attention.
TEST(ModelSize, FlopsPerTokenByHand) {
  const double products = 12.0 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072) + 50257.0 * 768;
  EXPECT_DOUBLE_EQ(model_size(preset("gpt2")).flops_per_token, 2 * products + 4.0 * 12 * 1024 * 768);
  EXPECT_DOUBLE_EQ(model_size(preset("gpt2"), 10).flops_per_token, 2 * products + 4.0 * 12 * 10 * 768);
  EXPECT_EQ(model_size(preset("gpt2"), 10).params, model_size(preset("gpt2")).params);
}

// shape_of(cfg) counts what GPT(cfg) allocates, for every layout qkv trains.
TEST(ModelSize, AgreesWithTheGptItDescribes) {
  for (bool bias : {false, true})
    for (bool rope : {false, true})
      for (int64_t kv_heads : {4, 2, 1}) {
        GPTConfig cfg;
        cfg.vocab = 65;
        cfg.context = 32;
        cfg.layers = 2;
        cfg.heads = 4;
        cfg.kv_heads = kv_heads;
        cfg.embd = 32;
        cfg.bias = bias;
        cfg.rope = rope;
        EXPECT_EQ(model_size(shape_of(cfg)).params, GPT(cfg).num_params())
            << "bias " << bias << " rope " << rope << " kv_heads " << kv_heads;
      }
}

// A loaded Llama-family folder's config: three MLP matrices, RMSNorm, the
// head tied or not, biases per projection.
TEST(ModelSize, AgreesWithALlamaConfig) {
  for (bool tied : {false, true})
    for (bool attn_bias : {false, true})
      for (bool mlp_bias : {false, true}) {
        GPTConfig cfg;
        cfg.vocab = 65;
        cfg.context = 32;
        cfg.layers = 2;
        cfg.heads = 4;
        cfg.kv_heads = 2;
        cfg.embd = 32;
        cfg.ffn = 40;
        cfg.rope = cfg.rms_norm = cfg.swiglu = true;
        cfg.tied_head = tied;
        cfg.attn_bias = attn_bias;
        cfg.mlp_bias = mlp_bias;
        const ModelShape m = shape_of(cfg);
        EXPECT_EQ(m.arch, Arch::llama);
        EXPECT_EQ(model_size(m).params, GPT(cfg).num_params())
            << "tied " << tied << " attn_bias " << attn_bias << " mlp_bias " << mlp_bias;
      }
}

TEST(ModelSize, RefusesInconsistentShapes) {
  ModelShape m = preset("gpt2");
  m.heads = 5;
  EXPECT_THROW(model_size(m), Error);
  m = preset("llama3-8b");
  m.kv_heads = 3;
  EXPECT_THROW(model_size(m), Error);
  m = preset("gpt2");
  m.layers = 0;
  EXPECT_THROW(model_size(m), Error);
  m = preset("gpt2");
  m.embd = m.heads = m.kv_heads = int64_t{1} << 30;
  m.layers = m.vocab = int64_t{1} << 30;
  EXPECT_THROW(model_size(m), Error);  // more parameters than 64 bits hold
  EXPECT_THROW(model_size(preset("gpt2"), -1), Error);
  EXPECT_FALSE(find_preset("gpt-5").has_value());
}

}  // namespace
}  // namespace qkv
