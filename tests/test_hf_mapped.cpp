// A bf16 checkpoint's matrices read where the mapped file holds them
// (model/hf/hf_folder.cpp, model/gpt_weights.cpp): the same logits as the
// model's own bf16 copy of the same values, the float32 weights widened
// from the mapping, and a model whose weights are written computing with
// them (its own copy then) without ever writing to the file.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "model/hf/hf_folder.h"
#include "qkv/gpt.h"
#include "qkv/safetensors.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

// A one-block Llama (GQA, untied head) with random weights, stored as BF16
// or as the same values in F32.
struct Folder {
  fs::path dir;
  Folder(const std::string& name, DType dtype) {
    dir = fs::temp_directory_path() / ("qkv_hf_mapped_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json")
        << R"({"model_type": "llama", "vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
              "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "tie_word_embeddings": false})";
    const std::vector<std::pair<std::string, Shape>> shapes = {
        {"model.embed_tokens.weight", {11, 8}},
        {"model.layers.0.input_layernorm.weight", {8}},
        {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
        {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
        {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
        {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
        {"model.layers.0.post_attention_layernorm.weight", {8}},
        {"model.layers.0.mlp.gate_proj.weight", {16, 8}},
        {"model.layers.0.mlp.up_proj.weight", {16, 8}},
        {"model.layers.0.mlp.down_proj.weight", {8, 16}},
        {"model.norm.weight", {8}},
        {"lm_head.weight", {11, 8}}};
    std::mt19937 rng(5);  // the same values in both dtypes: bf16 ones
    std::normal_distribution<float> nd(0.0f, 0.5f);
    std::vector<Tensor> tensors;
    for (const auto& [name, shape] : shapes) {
      Tensor t(dtype, shape);
      for (int64_t i = 0; i < t.numel(); ++i) {
        const bfloat16 x = bf16_from_float(nd(rng));
        if (dtype == DType::bf16) t.data<bfloat16>()[i] = x;
        else t.data<float>()[i] = bf16_to_float(x);
      }
      tensors.push_back(std::move(t));
    }
    std::vector<std::pair<std::string, const Tensor*>> named;
    for (size_t i = 0; i < shapes.size(); ++i) named.emplace_back(shapes[i].first, &tensors[i]);
    write_safetensors((dir / "model.safetensors").string(), named);
  }
  ~Folder() { fs::remove_all(dir); }
  std::unique_ptr<GPT> load() const {
    return hf::load_weights(dir.string(), hf::read_architecture(dir.string()));
  }
};

std::vector<float> logits_of(GPT& m, const std::vector<int32_t>& ids) {
  m.forward(ids.data(), nullptr, 1, static_cast<int64_t>(ids.size()));
  return {m.logits(), m.logits() + ids.size() * m.config().vocab};
}

TEST(HfMapped, Bf16MatricesAreReadWhereTheFileHoldsThem) {
  const Folder bf16("bf16", DType::bf16), f32("f32", DType::f32);
  auto mapped = bf16.load(), own = f32.load();
  // Every 2-D tensor: the matrices, the head and the embedding table.
  const int64_t matrices = 11 * 8 + 8 * 8 + 4 * 8 + 4 * 8 + 8 * 8 + 16 * 8 + 16 * 8 + 8 * 16 + 11 * 8;
  EXPECT_EQ(mapped->mapped_weight_bytes(), 2 * matrices);
  EXPECT_EQ(own->mapped_weight_bytes(), 0);
  EXPECT_EQ(mapped->matrices_dtype(), DType::bf16);
  const std::vector<int32_t> ids = {1, 5, 9, 2, 10, 0};
  mapped->set_compute_dtype(DType::bf16);
  own->set_compute_dtype(DType::bf16);
  EXPECT_EQ(logits_of(*mapped, ids), logits_of(*own, ids));  // bit for bit
  // Float32 compute widens the mapped values: exactly the float32 file's.
  mapped->set_compute_dtype(DType::f32);
  own->set_compute_dtype(DType::f32);
  EXPECT_EQ(logits_of(*mapped, ids), logits_of(*own, ids));
  EXPECT_EQ(mapped->matrices_dtype(), DType::f32);
  // bf16 compute still reads the matrices from the file; the embedding now
  // reads the float32 table.
  EXPECT_EQ(mapped->mapped_weight_bytes(), 2 * (matrices - 11 * 8));
  // Written weights: bf16 compute rounds them into the model's own copy
  // (the file, mapped read-only, is never written) and uses them.
  for (GPT* m : {mapped.get(), own.get()}) {
    for (float& w : m->weights()) w *= 0.5f;
    m->set_compute_dtype(DType::bf16);
  }
  const std::vector<float> halved = logits_of(*mapped, ids);
  EXPECT_EQ(halved, logits_of(*own, ids));
  EXPECT_EQ(mapped->mapped_weight_bytes(), 0);
  mapped.reset();  // the file outlives the model unchanged, and is readable again
  auto again = bf16.load();
  EXPECT_EQ(again->mapped_weight_bytes(), 2 * matrices);
}

}  // namespace
}  // namespace qkv
