// A checkpoint's matrices read where the mapped file holds them
// (model/hf/mapped_weights.cpp, model/gpt_weights.cpp), in bf16 and in
// float32: the same logits as the model's own copy of the same values,
// under float32 and bf16 compute, and a model whose weights are written
// computing with them (its own copy then) without ever writing the file.
// And a folder in shards: each tensor read from the shard that holds it,
// whatever shard model.safetensors.index.json names for it.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "core/isa_kernels.h"
#include "io/safetensors_map.h"
#include "model/hf/hf_folder.h"
#include "qkv/gpt.h"
#include "qkv/runtime.h"
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

// Float32 logits of the mapped matrices against the model's own copy. Where
// the CPU's few-row products run on qkv's dot-product kernels (AVX-512), each
// element is one kernel's sum in a fixed order whatever the matrix around it:
// bit for bit. Elsewhere they run on oneDNN, whose blocking depends on the
// matrix's width (the copy's fused q, k and v against three mapped runs), so
// the sums may round differently in the last bit: within 1e-6 of the largest.
void expect_same_f32_logits(const std::vector<float>& got, const std::vector<float>& want,
                            const std::string& what) {
  if (kernels::isa_kernels(active_isa()).gemm_dot) {
    EXPECT_EQ(got, want) << what;
    return;
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  float largest = 0.0f;
  for (float x : want) largest = std::max(largest, std::abs(x));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f * largest) << what << " [" << i << "]";
}

TEST(HfMapped, MatricesAreReadWhereTheFileHoldsThem) {
  const Folder bf16("bf16", DType::bf16), f32("f32", DType::f32);
  auto m16 = bf16.load(), m32 = f32.load(), own = f32.load();
  own->weights();  // the model's own float32 copy, taken from the mapping
  // Every 2-D tensor: the matrices, the head and the embedding table.
  const int64_t matrices = 11 * 8 + 8 * 8 + 4 * 8 + 4 * 8 + 8 * 8 + 16 * 8 + 16 * 8 + 8 * 16 + 11 * 8;
  EXPECT_EQ(m16->mapped_weight_bytes(), 2 * matrices);
  EXPECT_EQ(m32->mapped_weight_bytes(), 4 * matrices);
  EXPECT_EQ(own->mapped_weight_bytes(), 0);
  EXPECT_EQ(m16->matrices_dtype(), DType::bf16);
  EXPECT_EQ(m32->matrices_dtype(), DType::f32);
  const std::vector<int32_t> ids = {1, 5, 9, 2, 10, 0};
  // Float32 compute, bit for bit: the mapped float32 file, its copy, and the
  // bf16 file's values widened (the same values).
  const std::vector<float> f32_logits = logits_of(*own, ids);
  expect_same_f32_logits(logits_of(*m32, ids), f32_logits, "mapped float32");
  for (int threads : {1, 3, 8}) {  // columns shared out across the q, k and v runs every way
    m32->set_threads(threads);
    expect_same_f32_logits(logits_of(*m32, ids), f32_logits, std::to_string(threads) + " threads");
  }
  m32->set_threads(0);
  EXPECT_EQ(logits_of(*m16, ids), f32_logits);
  EXPECT_EQ(m16->matrices_dtype(), DType::f32);
  // bf16 still reads the matrices from the file; the embedding now reads
  // the float32 table.
  EXPECT_EQ(m16->mapped_weight_bytes(), 2 * (matrices - 11 * 8));
  // bf16 compute: the bf16 file where it lies, and the float32 file's
  // values rounded from where that file lies, bit for bit.
  for (GPT* m : {m16.get(), m32.get(), own.get()}) m->set_compute_dtype(DType::bf16);
  const std::vector<float> bf16_logits = logits_of(*own, ids);
  EXPECT_NE(bf16_logits, f32_logits);
  EXPECT_EQ(logits_of(*m16, ids), bf16_logits);
  EXPECT_EQ(logits_of(*m32, ids), bf16_logits);
  EXPECT_EQ(m32->mapped_weight_bytes(), 4 * matrices);  // float32 compute would read it again
  // Written weights: the model's own copy (the files, mapped read-only, are
  // never written), which bf16 compute rounds again.
  for (GPT* m : {m16.get(), m32.get(), own.get()})
    for (float& w : m->weights()) w *= 0.5f;
  const std::vector<float> halved = logits_of(*own, ids);
  EXPECT_NE(halved, bf16_logits);
  EXPECT_EQ(logits_of(*m16, ids), halved);
  EXPECT_EQ(logits_of(*m32, ids), halved);
  EXPECT_EQ(m16->mapped_weight_bytes(), 0);
  EXPECT_EQ(m32->mapped_weight_bytes(), 0);
  m16.reset();  // the files outlive the models unchanged
  m32.reset();
  EXPECT_EQ(logits_of(*bf16.load(), ids), f32_logits);
  expect_same_f32_logits(logits_of(*f32.load(), ids), f32_logits, "mapped again");
}

// A tensor's pages let go (release) are read again from the file with the
// same values, mapped at once or as first read.
TEST(HfMapped, ReleasedPagesReadTheSameValues) {
  const Folder f("release", DType::f32);
  const std::string file = (f.dir / "model.safetensors").string();
  const std::map<std::string, Tensor> want = read_safetensors(file);
  for (bool populate : {true, false}) {
    const SafetensorsMapping m(file, populate);
    for (const SafetensorsEntry& e : m.entries()) {
      const Tensor& t = want.at(e.name);
      const auto* at = reinterpret_cast<const float*>(m.data(e.name));
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(at[i], t.data<float>()[i]) << e.name;
        m.release(e.name);
      }
    }
  }
}

// f's model.safetensors split in two shards, model-0000k-of-00002.safetensors
// (the tensors in `second` in the second), with an index whose weight_map
// gives each tensor its shard, except where `wrong` says otherwise.
void shard(const Folder& f, const std::set<std::string>& second, const std::map<std::string, std::string>& wrong) {
  const fs::path single = f.dir / "model.safetensors";
  const std::map<std::string, Tensor> all = read_safetensors(single.string());
  std::vector<std::pair<std::string, const Tensor*>> parts[2];
  std::ofstream index(f.dir / "model.safetensors.index.json");
  index << R"({"metadata": {}, "weight_map": {)";
  const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  const char* comma = "";
  for (const auto& [name, t] : all) {
    const int k = second.count(name) ? 1 : 0;
    parts[k].emplace_back(name, &t);
    const auto w = wrong.find(name);
    index << comma << '"' << name << R"(": ")" << (w != wrong.end() ? w->second : names[k]) << '"';
    comma = ", ";
  }
  for (const auto& [name, file] : wrong)
    if (!all.count(name)) index << R"(, ")" << name << R"(": ")" << file << '"';
  index << "}}";
  index.close();
  for (int k = 0; k < 2; ++k) write_safetensors((f.dir / names[k]).string(), parts[k]);
  fs::remove(single);
}

std::string error_of(const std::string& dir) {
  try {
    hf::read_architecture(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An index entry that names the wrong shard for a tensor: read from the
// shard that has it (as transformers reads such a folder), with one warning
// naming the entry; refused, naming it, when no shard has the tensor.
TEST(HfShards, AnIndexNamingTheWrongShardIsReadPastWithAWarning) {
  const std::vector<int32_t> ids = {1, 5, 9, 2};
  const std::string up = "model.layers.0.mlp.up_proj.weight", one = "model-00001-of-00002.safetensors";
  const std::vector<float> want = logits_of(*Folder("whole", DType::f32).load(), ids);
  {
    const Folder f("shards_right", DType::f32);
    shard(f, {up, "lm_head.weight"}, {});
    EXPECT_TRUE(hf::read_architecture(f.dir.string()).checkpoint.warnings.empty());
    EXPECT_EQ(logits_of(*f.load(), ids), want);
  }
  // The shard that has it is listed for another tensor, or (its only
  // tensor misplaced) listed for none: found as the series' other file.
  for (const std::set<std::string>& second : {std::set<std::string>{up, "lm_head.weight"}, std::set<std::string>{up}}) {
    const Folder f("shards_wrong", DType::f32);
    shard(f, second, {{up, one}});
    const hf::Architecture arch = hf::read_architecture(f.dir.string());
    const std::string index = (f.dir / "model.safetensors.index.json").string();
    EXPECT_EQ(arch.checkpoint.warnings,
              std::vector<std::string>{"'" + index + "' maps '" + up +
                                       "' to '" + one + "', which has no such tensor; read it from "
                                       "'model-00002-of-00002.safetensors'"});
    EXPECT_EQ(logits_of(*hf::load_weights(f.dir.string(), arch), ids), want);
  }
  {
    const Folder f("shards_none", DType::f32);
    shard(f, {up}, {{"model.layers.0.mlp.extra.weight", one}});
    const std::string index = (f.dir / "model.safetensors.index.json").string();
    EXPECT_EQ(error_of(f.dir.string()),
              "'" + index + "' maps 'model.layers.0.mlp.extra.weight' to '" + one +
                  "', which has no such tensor, and no other shard has it");
  }
  {
    const Folder f("shards_missing", DType::f32);
    shard(f, {up}, {{up, "model-00003-of-00002.safetensors"}});
    const std::string index = (f.dir / "model.safetensors.index.json").string();
    EXPECT_EQ(error_of(f.dir.string()), "'" + index + "' maps '" + up +
                                            "' to 'model-00003-of-00002.safetensors', which is not in the folder");
  }
}

}  // namespace
}  // namespace qkv
