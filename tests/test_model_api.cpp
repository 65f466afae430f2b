// qkv::Model (qkv/model.h) against the pieces it wraps: a model saved with
// save_model, loaded back, gives the same logits, attention and samples as
// the GPT it was saved from.
#include <cmath>
#include <filesystem>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "qkv/model.h"

namespace qkv {
namespace {

struct SavedModel {
  std::string dir;
  CharTokenizer tok = CharTokenizer::from_text("hello world, hold the door\n");
  GPTConfig cfg;
  std::unique_ptr<GPT> gpt;

  explicit SavedModel(bool rope) {
    dir = (std::filesystem::temp_directory_path() /
           ("qkv_model_api_" + std::to_string(::getpid()) + (rope ? "_rope" : "")))
              .string();
    std::filesystem::create_directories(dir);
    cfg.vocab = tok.vocab_size();
    cfg.context = 16;
    cfg.layers = 2;
    cfg.heads = 4;
    cfg.kv_heads = 2;
    cfg.embd = 16;
    cfg.rope = rope;
    gpt = std::make_unique<GPT>(cfg);
    gpt->init(7);
    save_model(dir, *gpt, tok);
  }
  ~SavedModel() { std::filesystem::remove_all(dir); }
};

TEST(ModelApi, LogitsAttentionAndSamplesMatchTheSavedGpt) {
  for (bool rope : {false, true}) {
    SavedModel s(rope);
    Model m = Model::load(s.dir);
    EXPECT_EQ(m.config().vocab, s.cfg.vocab);
    const std::vector<int32_t> ids = m.tokenizer().encode("hold the");
    const int64_t T = static_cast<int64_t>(ids.size()), V = s.cfg.vocab;

    const Tensor logits = m.logits(ids);
    ASSERT_EQ(logits.shape(), (Shape{T, V}));
    s.gpt->forward(ids.data(), nullptr, 1, T);
    for (int64_t i = 0; i < T * V; ++i) ASSERT_EQ(logits.data<float>()[i], s.gpt->logits()[i]) << i;

    const Tensor maps = m.attention_maps(ids);
    ASSERT_EQ(maps.shape(), (Shape{s.cfg.layers, s.cfg.heads, T, T}));
    for (int64_t r = 0; r < s.cfg.layers * s.cfg.heads * T; ++r) {
      const float* row = maps.data<float>() + r * T;
      const int64_t i = r % T;
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        if (j > i) {
          EXPECT_EQ(row[j], 0.0f) << "causal: query " << i << " sees key " << j;
        }
        sum += row[j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }

    const SampleOptions o{.prompt = "he", .tokens = 12, .seed = 3};
    const std::vector<int32_t> a = m.generate(o);
    const std::vector<int32_t> b = sample(*s.gpt, s.tok, o, [](const std::string&) {});
    EXPECT_EQ(a, b);
  }
}

TEST(ModelApi, BadInputsAreErrors) {
  EXPECT_THROW(Model::load("/nonexistent/qkv-model"), Error);
  SavedModel s(false);
  Model m = Model::load(s.dir);
  EXPECT_THROW(m.logits({}), Error);
  EXPECT_THROW(m.logits(std::vector<int32_t>(17, 0)), Error);  // past the context
  EXPECT_THROW(m.logits({0, static_cast<int32_t>(s.cfg.vocab)}), Error);
}

}  // namespace
}  // namespace qkv
