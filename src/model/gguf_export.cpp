// gguf_export.cpp: a model written as a quantized GGUF file
// (qkv/quantize.h). The model is loaded as qkv loads it for running (a
// folder mapped as it is stored, a GGUF file's tensors as theirs), then
// each parameter goes back to the tensors llama.cpp names (gguf_names.h),
// row slices of it, quantized one tensor at a time as the file is
// written, a few hundred rows at a time: widened to float32 (a GGUF
// file's dequantized exactly) only as they are quantized, so that an 8B
// model is written from a machine that could not hold it in float32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/json_strict.h"
#include "model/gguf_model.h"
#include "model/gguf_names.h"
#include "model/gpt_work.h"
#include "qkv/bpe.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/model.h"
#include "qkv/quantize.h"

namespace qkv {
namespace {

// Rows widened to float32 at a time: a few MB for the widest models, a
// whole number of blocks for each thread to quantize.
constexpr int64_t kChunkRows = 256;

[[noreturn]] void cannot(const std::string& input, const std::string& what) {
  throw Error("quantize: '" + input + "': " + what + "; a GGUF file describes GPT-2, Llama-family and Qwen2 decoders");
}

// The GGUF architecture whose maths is exactly the config's, or an error
// naming what differs.
std::string architecture_of(const std::string& input, const GPTConfig& c) {
  if (!c.causal || !c.lm_head || c.post_norm || c.token_types || c.embed_norm || !c.final_norm)
    cannot(input, "an encoder (BERT) is not a decoder");
  if (c.window) cannot(input, "sliding-window attention (" + std::to_string(c.window) + " positions) is not written by GGUF");
  if (c.rope && c.rms_norm && c.swiglu && !c.bias) {
    // Llama: biases on all four projections, or none (the reader finds them
    // by attn_q.bias); Qwen2: on q, k and v only, and never Llama 3.1's
    // rope_freqs, which llama.cpp reads for llama files only.
    if (!c.qkv_bias || c.proj_biased()) return "llama";
    if (c.mlp_biased()) cannot(input, "biases on q, k and v without the output projection's, beside the MLP's");
    using Kind = GPTConfig::RopeScaling::Kind;
    if (c.rope_scaling.kind == Kind::llama3 || c.rope_scaling.kind == Kind::factors)
      cannot(input, "Qwen2 with Llama 3.1's RoPE scaling is not written by GGUF");
    return "qwen2";
  }
  if (!c.rope && !c.rms_norm && !c.swiglu && c.bias && c.gelu == nn::Gelu::tanh && c.tied_head && c.kv_heads == c.heads &&
      c.head_size == 0)
    return "gpt2";
  cannot(input, "its blocks are neither GPT-2's (LayerNorm, biases, tanh GELU, learned positions) nor Llama's "
                "or Qwen2's (RMSNorm, SwiGLU, RoPE)");
}

// RoPE's factors as llama.cpp's converter stores Llama 3.1's scaling
// (tensor rope_freqs.weight): frequency i is divided by factor i. Empty
// when the config has none (no scaling, or linear). Computed in float32,
// step by step as the converter's torch code computes them (its pow
// correctly rounded, its divisions by a tensor as reciprocals), so that
// the bits are its own.
std::vector<float> rope_factors(const GPTConfig& c) {
  using Kind = GPTConfig::RopeScaling::Kind;
  const GPTConfig::RopeScaling& s = c.rope_scaling;
  if (s.kind == Kind::factors) return s.factors;
  if (s.kind != Kind::llama3) return {};
  const int64_t D = c.head_dim();
  const auto orig = static_cast<double>(s.original_context);
  const auto high_wavelen = static_cast<float>(orig / s.high_freq_factor), low_wavelen = static_cast<float>(orig / s.low_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  std::vector<float> out;
  for (int64_t i = 0; i < D; i += 2) {
    const float exponent = static_cast<float>(i) / static_cast<float>(D);
    const auto power = static_cast<float>(std::pow(c.rope_theta, static_cast<double>(exponent)));
    const float freq = 1.0f / power;
    const float wavelen = (1.0f / freq) * two_pi;
    float factor = 1.0f;  // short wavelengths (below high_wavelen): kept
    if (wavelen > low_wavelen) {
      factor = static_cast<float>(s.factor);
    } else if (!(wavelen < high_wavelen)) {
      const float smooth = ((1.0f / wavelen) * static_cast<float>(orig) - static_cast<float>(s.low_freq_factor)) /
                           static_cast<float>(s.high_freq_factor - s.low_freq_factor);
      factor = 1.0f / ((1.0f - smooth) / static_cast<float>(s.factor) + smooth);
    }
    out.push_back(factor);
  }
  return out;
}

// The ARCH.* keys llama.cpp's converter writes, which gguf_model.cpp reads back.
void put_config(GgufWriter& w, const std::string& arch, const GPTConfig& c) {
  const std::string a = arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  w.set(a + "context_length", u32(c.context));
  w.set(a + "embedding_length", u32(c.embd));
  w.set(a + "block_count", u32(c.layers));
  w.set(a + "feed_forward_length", u32(c.ffn_dim()));
  w.set(a + "attention.head_count", u32(c.heads));
  w.set(a + "attention.head_count_kv", u32(c.kv_heads));
  if (arch == "gpt2") {
    w.set(a + "attention.layer_norm_epsilon", GgufValue::f32(static_cast<float>(c.norm_eps)));
    return;
  }
  w.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(c.norm_eps)));
  w.set(a + "rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta)));
  if (c.head_size) {  // heads other than embedding_length / head_count wide
    w.set(a + "attention.key_length", u32(c.head_dim()));
    w.set(a + "attention.value_length", u32(c.head_dim()));
  }
  if (arch == "llama") {
    w.set(a + "rope.dimension_count", u32(c.head_dim()));
    w.set(a + "vocab_size", u32(c.vocab));
  }
  if (c.rope_scaling.kind == GPTConfig::RopeScaling::Kind::linear) {
    w.set(a + "rope.scaling.type", GgufValue::string("linear"));
    w.set(a + "rope.scaling.factor", GgufValue::f32(static_cast<float>(c.rope_scaling.factor)));
  }
}

// bos and eos from config.json's bos_token_id / eos_token_id where the
// tokenizer's files name none, as llama.cpp's converter takes them.
void special_ids_from_config(const std::string& dir, int64_t vocab, std::vector<std::pair<std::string, GgufValue>>& md) {
  const std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  const nlohmann::json config = parse_json_strict(read_file(path.string()), 64);
  for (const char* which : {"bos", "eos"}) {
    const std::string key = std::string("tokenizer.ggml.") + which + "_token_id";
    bool given = false;
    for (const auto& [k, v] : md) given = given || k == key;
    const auto it = config.find(std::string(which) + "_token_id");
    if (given || it == config.end() || !it->is_number_integer()) continue;
    const int64_t id = it->get<int64_t>();
    if (id >= 0 && id < vocab) md.emplace_back(key, GgufValue::u32(static_cast<uint32_t>(id)));
  }
}

// The metadata of the written file: a GGUF input's own (its file type and
// alignment left to the writer), else the config's and the tokenizer's.
void put_metadata(GgufWriter& w, const std::string& input, const Model& m, const std::string& arch, QuantMix mix) {
  w.set("general.architecture", GgufValue::string(arch));
  if (gguf::is_gguf_file(input)) {
    const GgufFile f = GgufFile::open(input);
    for (const auto& [key, value] : f.metadata())
      if (key != "general.architecture" && key != "general.file_type" && key != "general.alignment" &&
          key != "general.quantization_version")
        w.set(key, value);
  } else {
    const BpeTokenizer* tok = m.bpe_tokenizer();
    w.set("general.name", GgufValue::string(std::filesystem::path(input).filename().string()));
    put_config(w, arch, m.config());
    auto tokenizer = tok->gguf_metadata(m.config().vocab);
    special_ids_from_config(input, m.config().vocab, tokenizer);
    for (auto& [key, value] : tokenizer) w.set(key, std::move(value));
  }
  w.set("general.file_type", GgufValue::u32(quant_mix_file_type(mix)));
  w.set("general.quantization_version", GgufValue::u32(2));
}

}  // namespace

std::vector<QuantizedTensor> quantize_model(const std::string& input, const std::string& output,
                                            const QuantizeOptions& options) {
  Model m = Model::load(input);
  const GPTConfig& c = m.config();
  if (!m.bpe_tokenizer())
    cannot(input, m.is_encoder() ? "an encoder (BERT) is not a decoder"
                                 : "qkv's own character-level models have no BPE tokenizer for a GGUF file to hold");
  const std::string arch = architecture_of(input, c);
  GgufWriter w;
  put_metadata(w, input, m, arch, options.mix);

  const GPT& gpt = m.gpt();
  const gguf::SourceMap sources = gguf::source_map(c, arch);
  const std::vector<float> factors = rope_factors(c);
  int64_t total = factors.empty() ? 0 : 1;
  for (const auto& [param, list] : sources) total += static_cast<int64_t>(list.size());
  std::vector<QuantizedTensor> written;
  if (!factors.empty()) {  // first, as the converter writes it
    const Shape ne{static_cast<int64_t>(factors.size())};
    w.add_tensor("rope_freqs.weight", ne, static_cast<uint32_t>(WeightType::f32), [&](std::byte* out) {
      if (options.progress) options.progress("rope_freqs.weight", WeightType::f32, 0, total);
      std::memcpy(out, factors.data(), factors.size() * sizeof(float));
    });
    written.push_back({"rope_freqs.weight", ne, WeightType::f32});
  }
  for (const ParamInfo& p : gpt.params()) {
    const auto it = sources.find(p.name);
    if (it == sources.end()) throw Error("quantize: no GGUF tensor is named for " + p.name);
    const int64_t width = p.size / p.shape[0];
    int64_t at = 0;
    for (const gguf::Source& s : it->second) {
      const Shape ne = p.shape.size() == 1 ? Shape{s.rows} : Shape{width, s.rows};
      const WeightType type = quant_mix_type(options.mix, s.name, ne[0], static_cast<int>(ne.size()), c.layers, c.tied_head);
      const auto index = static_cast<int64_t>(written.size());
      w.add_tensor(s.name, ne, static_cast<uint32_t>(type), [=, &gpt, &options](std::byte* out) {
        if (options.progress) options.progress(s.name, type, index, total);
        if (ne.size() == 1) {  // a norm or a bias: one row
          std::vector<float> x(static_cast<size_t>(s.rows));
          GptLoader::rows_at(gpt, p.offset, 1, at, s.rows, x.data());
          quantize_row(type, x.data(), out, s.rows);
          return;
        }
        // Chunks of whole heads where llama's q and k rows are rearranged.
        const int64_t head_rows = s.unpermute_heads ? s.rows / s.unpermute_heads : 1;
        const int64_t chunk = std::max<int64_t>(1, kChunkRows / head_rows) * head_rows;
        const uint64_t row_bytes = weight_bytes(type, width);
        std::vector<float> x(static_cast<size_t>(std::min(chunk, s.rows) * width)), permuted;
        if (s.unpermute_heads) permuted.resize(x.size());
        for (int64_t r0 = 0; r0 < s.rows; r0 += chunk) {
          const int64_t n = std::min(chunk, s.rows - r0);
          GptLoader::rows_at(gpt, p.offset, width, at + r0, n, x.data());
          const float* src = x.data();
          if (s.unpermute_heads) {  // llama's q and k in the converter's row order
            gguf::permute(reinterpret_cast<const uint8_t*>(x.data()), reinterpret_cast<uint8_t*>(permuted.data()), n,
                          n / head_rows, sizeof(float) * static_cast<uint64_t>(width));
            src = permuted.data();
          }
          std::byte* dst = out + static_cast<uint64_t>(r0) * row_bytes;
#pragma omp parallel for schedule(dynamic, 16)
          for (int64_t r = 0; r < n; ++r) quantize_row(type, src + r * width, dst + static_cast<uint64_t>(r) * row_bytes, width);
        }
      });
      written.push_back({s.name, ne, type});
      at += s.rows;
    }
  }
  w.write(output);
  return written;
}

}  // namespace qkv
