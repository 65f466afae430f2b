// qkv::Model (qkv/model.h) against the pieces it wraps: a model saved with
// save_model, loaded back, gives the same logits, attention and samples as
// the GPT it was saved from.
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
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

  explicit SavedModel(bool rope, int64_t embd = 16) {
    dir = (std::filesystem::temp_directory_path() /
           ("qkv_model_api_" + std::to_string(::getpid()) + (rope ? "_rope" : "") + "_" + std::to_string(embd)))
              .string();
    std::filesystem::create_directories(dir);
    cfg.vocab = tok.vocab_size();
    cfg.context = 16;
    cfg.layers = 2;
    cfg.heads = 4;
    cfg.kv_heads = 2;
    cfg.embd = embd;
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
    const Generation a = m.generate(o);
    std::string text;
    const std::vector<int32_t> b = sample(*s.gpt, s.tok, o, [&](const std::string& piece) { text += piece; });
    EXPECT_EQ(a.ids, b);
    EXPECT_EQ(a.text, text);
    EXPECT_EQ(a.text, m.decode(b));
    EXPECT_EQ(a.stop, StopReason::tokens);
  }
}

// A quantized model's KV cache is bf16 unless asked otherwise, as
// llama.cpp keeps one in f16: half the bytes a decode step reads there.
TEST(ModelApi, AQuantizedModelCachesInBf16) {
  SavedModel s(true, 32);  // a row of 32: one Q8_0 block
  LoadOptions o;
  o.quantize = WeightType::q8_0;
  Model q = Model::load(s.dir, o), f = Model::load(s.dir);
  ASSERT_TRUE(q.gpt().matrices_quantized());
  EXPECT_EQ(q.gpt().default_kv_dtype(DType::f32), DType::bf16);
  EXPECT_EQ(q.gpt().new_cache().dtype(), DType::bf16);
  EXPECT_EQ(q.gpt().new_cache(DType::f32).dtype(), DType::f32);
  EXPECT_EQ(f.gpt().default_kv_dtype(DType::f32), DType::f32);
  EXPECT_EQ(f.gpt().default_kv_dtype(DType::bf16), DType::bf16);
  EXPECT_EQ(f.gpt().new_cache().dtype(), DType::f32);
}

// Sequences side by side on one Model, each with its own cache: a step of
// three together gives each the logits it gets alone (the same bits for a
// quantized model, within float32 rounding for float32 products), greedy
// tokens the same; the caches grow independently.
TEST(ModelApi, SequencesOfTheirOwnDecodeTogetherAsAlone) {
  SavedModel s(true, 32);
  LoadOptions o;
  o.quantize = WeightType::q8_0;
  for (const bool quantized : {true, false}) {
    SCOPED_TRACE(quantized ? "q8_0" : "float32");
    Model m = quantized ? Model::load(s.dir, o) : Model::load(s.dir);
    const std::vector<std::string> prompts = {"he", "hold the", "world, "};
    const int64_t V = s.cfg.vocab, steps = 4;
    auto argmax = [&](const float* l) { return static_cast<int32_t>(std::max_element(l, l + V) - l); };
    std::vector<std::vector<std::vector<float>>> alone(prompts.size());
    std::vector<KVCache> caches;
    std::vector<int32_t> next;
    for (size_t i = 0; i < prompts.size(); ++i) {
      KVCache c = m.new_cache();
      EXPECT_EQ(c.dtype(), quantized ? DType::bf16 : DType::f32);
      Tensor l = m.next_logits(m.tokenize(prompts[i]), c);
      ASSERT_EQ(l.shape(), (Shape{V}));
      for (int64_t t = 0; t < steps; ++t) {
        l = m.next_logits({argmax(l.data<float>())}, c);
        alone[i].emplace_back(l.data<float>(), l.data<float>() + V);
      }
      caches.push_back(m.new_cache());
      next.push_back(argmax(m.next_logits(m.tokenize(prompts[i]), caches.back()).data<float>()));
    }
    const std::vector<KVCache*> ptrs = {&caches[0], &caches[1], &caches[2]};
    for (int64_t t = 0; t < steps; ++t) {
      const Tensor l = m.next_logits(next, ptrs);
      ASSERT_EQ(l.shape(), (Shape{3, V}));
      for (size_t i = 0; i < prompts.size(); ++i) {
        const float* row = l.data<float>() + i * V;
        for (int64_t v = 0; v < V; ++v) {
          if (quantized) ASSERT_EQ(row[v], alone[i][t][v]) << "sequence " << i << ", step " << t;
          else ASSERT_NEAR(row[v], alone[i][t][v], 1e-5) << "sequence " << i << ", step " << t;
        }
        next[i] = argmax(row);
      }
    }
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(caches[i].len(), static_cast<int64_t>(m.tokenize(prompts[i]).size()) + steps);
    EXPECT_THROW(m.next_logits({1}, ptrs), Error);  // one token a sequence
    EXPECT_THROW(m.next_logits({}, caches[0]), Error);
  }
}

// A model's float32 room is reserved, not committed: an 8B quantized
// model's 32 GB of it, never touched but for its norms, loads on a machine
// with less memory than that (where the kernel overcommits as by default).
TEST(ModelApi, WeightsRoomBeyondMemoryIsReservedNotRefused) {
  std::ifstream mode_file("/proc/sys/vm/overcommit_memory");
  int mode = 0;
  if (!(mode_file >> mode) || mode == 2) GTEST_SKIP() << "strict overcommit: every mapping is committed";
  const size_t bytes = size_t{64} << 30;  // 64 GiB, more than this machine (24 GiB) holds
  void* p = alloc_zeroed(bytes);
  ASSERT_NE(p, nullptr);
  static_cast<volatile char*>(p)[bytes / 2] = 1;  // a page in the middle is there to write
  free_zeroed(p, bytes);
}

TEST(ModelApi, BadInputsAreErrors) {
  EXPECT_THROW(Model::load("/nonexistent/qkv-model"), Error);
  SavedModel s(false);
  Model m = Model::load(s.dir);
  EXPECT_THROW(m.logits({}), Error);
  EXPECT_THROW(m.logits(std::vector<int32_t>(17, 0)), Error);  // past the context
  EXPECT_THROW(m.logits({0, static_cast<int32_t>(s.cfg.vocab)}), Error);
}

// The error's message, or "" when f does not throw qkv::Error.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelApi, NamedWeightsRoundTripThroughFromTensorsAndSave) {
  SavedModel s(false);
  const Model m = Model::load(s.dir);
  const std::vector<std::pair<std::string, Tensor>> named = m.named_weights();
  ASSERT_EQ(named.size(), s.gpt->params().size());
  std::map<std::string, Tensor> tensors;
  for (size_t i = 0; i < named.size(); ++i) {
    const ParamInfo& p = s.gpt->params()[i];
    ASSERT_EQ(named[i].first, p.name);
    ASSERT_EQ(named[i].second.shape(), p.shape);
    ASSERT_TRUE(std::equal(s.gpt->weights().begin() + p.offset,
                           s.gpt->weights().begin() + p.offset + p.size,
                           named[i].second.data<float>()))
        << p.name;
    tensors.emplace(named[i]);
  }
  Model copy = Model::from_tensors(s.cfg, tensors, s.tok, "copy");
  EXPECT_TRUE(std::ranges::equal(copy.gpt().weights(), s.gpt->weights()));
  const std::string dir = s.dir + "_copy";
  std::filesystem::create_directories(dir);
  copy.save(dir);
  EXPECT_TRUE(std::ranges::equal(Model::load(dir).gpt().weights(), s.gpt->weights()));
  std::filesystem::remove_all(dir);
}

TEST(ModelApi, FromTensorsNamesTheTensorThatIsWrong) {
  SavedModel s(false);
  std::map<std::string, Tensor> good;
  for (auto& [name, t] : Model::load(s.dir).named_weights()) good.emplace(name, std::move(t));
  const std::string wpe = "transformer.wpe.weight";
  auto with = [&](Tensor t) {
    std::map<std::string, Tensor> m = good;
    m.insert_or_assign(wpe, std::move(t));
    return m;
  };
  auto from = [&](const std::map<std::string, Tensor>& t) {
    return error_of([&] { Model::from_tensors(s.cfg, t, s.tok, "w.safetensors"); });
  };
  std::map<std::string, Tensor> missing = good;
  missing.erase(wpe);
  EXPECT_EQ(from(missing), "'w.safetensors': missing tensor '" + wpe + "'");
  EXPECT_EQ(from(with(Tensor(DType::f32, {15, 16}))),
            "'w.safetensors': tensor '" + wpe + "' should be float32 [16, 16], found float32 [15, 16]");
  EXPECT_EQ(from(with(Tensor(DType::f64, {16, 16}))),
            "'w.safetensors': tensor '" + wpe + "' should be float32 [16, 16], found float64 [16, 16]");
  Tensor nan(DType::f32, {16, 16});
  nan.data<float>()[37] = std::nanf("");
  EXPECT_EQ(from(with(std::move(nan))), "'w.safetensors': tensor '" + wpe + "' holds a non-finite value");
  GPTConfig bad = s.cfg;
  bad.heads = 3;
  EXPECT_NE(error_of([&] { Model::from_tensors(bad, good, s.tok, "w"); }).find("heads must divide"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
