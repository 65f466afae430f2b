// gguf_model.cpp: a GGUF file as one configuration of qkv's model. The
// metadata keys are llama.cpp's (convert_hf_to_gguf.py); the tensor names
// and the q/k row order are in gguf_names.h.
//
// In a quantized file, the Linear matrices, the head and the embedding
// table stay as the file stores them (qkv/weight.h), read where the mapped
// file holds them (q and k, rearranged, in a buffer of the model's), unless
// the caller asks for every weight dequantized; norms and biases are
// dequantized to float32, as is everything in a file of float types only.
#include "model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "model/gguf_names.h"
#include "model/gpt_work.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/weight_type.h"

namespace qkv::gguf {

namespace {

using Kind = GPTConfig::RopeScaling::Kind;

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

// The metadata keys of each architecture qkv reads (the key without its
// "ARCH." prefix); any other key under the prefix may change the maths and
// is refused by name.
const std::set<std::string>& known_keys(const std::string& arch) {
  static const std::set<std::string> llama = {
      "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
      "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
      "attention.key_length", "attention.value_length", "rope.freq_base", "rope.dimension_count",
      "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
      "rope.scaling.finetuned", "rope.scale_linear"};
  static const std::set<std::string> gpt2 = {
      "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
      "attention.head_count", "attention.head_count_kv", "attention.layer_norm_epsilon"};
  return arch == "gpt2" ? gpt2 : llama;  // qwen2: llama's keys
}

// Reads the metadata of `f` under the prefix "ARCH.", each error naming the
// file and the key.
struct Meta {
  const GgufFile& f;
  std::string prefix;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error("'" + f.name() + "': metadata " + in_quotes(prefix + key) + ": " + why);
  }
  bool has(const std::string& key) const { return f.find(prefix + key) != nullptr; }
  int64_t size(const std::string& key) const {
    const int64_t v = f.get_int(prefix + key);
    if (v < 1) fail(key, "expected an integer >= 1, found " + std::to_string(v));
    return v;
  }
  int64_t size_or(const std::string& key, int64_t fallback) const { return has(key) ? size(key) : fallback; }
  double positive_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const double v = f.get_float(prefix + key);
    if (!(v > 0)) fail(key, "expected a number > 0, found " + std::to_string(v));
    return v;
  }
  // `key`, when given, must equal `want` (what the other keys make).
  void expect(const std::string& key, int64_t want, const std::string& because) const {
    if (has(key) && f.get_int(prefix + key) != want)
      fail(key, std::to_string(f.get_int(prefix + key)) + " is not supported (only " + std::to_string(want) +
                    ", " + because + ")");
  }
};

// Llama 3.1's RoPE scaling as llama.cpp's converter stores it: tensor
// rope_freqs.weight, F32 [head_dim / 2], a factor that divides each
// frequency. Returns whether the file has it.
bool read_rope_factors(const GgufFile& f, GPTConfig& c) {
  const GgufTensor* t = f.find_tensor("rope_freqs.weight");
  if (!t) return false;
  const int64_t n = c.head_dim() / 2;
  if (t->shape != Shape{n} || t->ggml_type != static_cast<uint32_t>(WeightType::f32)) {
    const GgmlTypeLayout* layout = ggml_type_layout(t->ggml_type);
    throw Error("'" + f.name() + "': tensor rope_freqs.weight should be F32 " + shape_str({n}) + " (half a head), found " +
                (layout ? layout->name : "?") + " " + shape_str(t->shape));
  }
  std::vector<float> factors(static_cast<size_t>(n));
  std::memcpy(factors.data(), t->bytes.data(), factors.size() * sizeof(float));
  for (float v : factors)
    if (!std::isfinite(v) || !(v > 0))
      throw Error("'" + f.name() + "': tensor rope_freqs.weight holds " + std::to_string(v) + " (factors must be finite > 0)");
  c.rope_scaling.kind = Kind::factors;
  c.rope_scaling.factors = std::move(factors);
  return true;
}

// RoPE's base and scaling: none or linear (rope.scaling.type, or the older
// rope.scale_linear), or a factor per frequency (rope_freqs.weight); YaRN
// and the others are refused by name.
void read_rope(const Meta& m, GPTConfig& c) {
  c.rope_theta = m.positive_or("rope.freq_base", 10000.0);
  m.expect("rope.dimension_count", c.head_dim(), "RoPE on every dimension of a head");
  std::string type = m.has("rope.scaling.type") ? m.f.get_string(m.prefix + "rope.scaling.type") : "none";
  double factor = m.positive_or("rope.scaling.factor", 1.0);
  if (m.has("rope.scale_linear")) {
    if (m.has("rope.scaling.type")) m.fail("rope.scale_linear", "given beside rope.scaling.type; a file gives one");
    type = "linear";
    factor = m.positive_or("rope.scale_linear", 1.0);
  }
  // Only llama files carry factors (llama.cpp's other architectures read none).
  const bool factors = m.prefix == "llama." && read_rope_factors(m.f, c);
  if (type == "none") return;
  if (type != "linear") m.fail("rope.scaling.type", in_quotes(type) + " is not supported (none, linear)");
  if (factors && factor != 1.0)
    m.fail("rope.scaling.type", "linear scaling beside tensor rope_freqs.weight is not supported (one or the other)");
  if (factor != 1.0) {
    c.rope_scaling.kind = Kind::linear;
    c.rope_scaling.factor = factor;
  }
}

// The config of the file's architecture from its metadata; the vocabulary
// is the token list's length.
GPTConfig read_config(const GgufFile& f, const std::string& arch) {
  const Meta m{f, arch + "."};
  for (const auto& [key, value] : f.metadata())
    if (key.rfind(m.prefix, 0) == 0 && !known_keys(arch).count(key.substr(m.prefix.size())))
      throw Error("'" + f.name() + "': metadata " + in_quotes(key) + " is not supported by qkv's " + arch +
                  " model (it may change the maths)");
  GPTConfig c;
  c.vocab = static_cast<int64_t>(f.get_strings("tokenizer.ggml.tokens").size());
  if (c.vocab < 1) throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.tokens\": the token list is empty");
  m.expect("vocab_size", c.vocab, "the length of tokenizer.ggml.tokens");
  c.embd = m.size("embedding_length");
  c.layers = m.size("block_count");
  c.heads = m.size("attention.head_count");
  c.kv_heads = m.size_or("attention.head_count_kv", c.heads);
  c.ffn = m.size("feed_forward_length");
  c.context = m.size("context_length");
  if (c.heads % c.kv_heads != 0)
    m.fail("attention.head_count_kv", std::to_string(c.kv_heads) + " does not divide head_count " + std::to_string(c.heads));
  // A head's width: attention.key_length where the file gives it (a model
  // whose heads are not embedding_length / head_count wide), else the split.
  if (arch != "gpt2" && m.has("attention.key_length")) {
    const int64_t hs = m.size("attention.key_length");
    if (hs * c.heads != c.embd) c.head_size = hs;
  } else if (c.embd % c.heads != 0) {
    m.fail("attention.head_count", std::to_string(c.heads) + " does not divide embedding_length " + std::to_string(c.embd));
  }
  m.expect("attention.value_length", c.head_dim(), "key_length: values as wide as keys");
  if (arch != "gpt2") {
    if (!m.has("attention.layer_norm_rms_epsilon")) m.fail("attention.layer_norm_rms_epsilon", "missing");
    c.norm_eps = m.positive_or("attention.layer_norm_rms_epsilon", 0);
    read_rope(m, c);
    c.rope = true;
    c.bias = false;
    c.rms_norm = true;
    c.swiglu = true;
    // Qwen2's q, k and v always have biases; a llama file's four projections may.
    if (arch == "qwen2") c.qkv_bias = true;
    else c.attn_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.mlp_bias = f.find_tensor("blk.0.ffn_gate.bias") != nullptr;
  } else {
    if (c.kv_heads != c.heads) m.fail("attention.head_count_kv", "must equal head_count in a gpt2 model");
    if (!m.has("attention.layer_norm_epsilon")) m.fail("attention.layer_norm_epsilon", "missing");
    c.norm_eps = m.positive_or("attention.layer_norm_epsilon", 0);
    c.gelu = nn::Gelu::tanh;  // ggml's gelu, as GPT-2's gelu_new
    c.bias = true;
  }
  c.tied_head = f.find_tensor("output.weight") == nullptr;
  return c;
}

// The type of tensor `t`, checked: `want` its shape (ggml's order), a type
// qkv computes with, rows a whole number of its blocks.
const WeightTypeInfo& checked_type(const GgufFile& f, const GgufTensor& t, const Shape& want) {
  if (t.shape != want)
    throw Error("'" + f.name() + "': tensor " + t.name + " should be " + shape_str(want) +
                " (ne[0] first, from the metadata), found " + shape_str(t.shape));
  const WeightTypeInfo* type = weight_type_from_ggml(t.ggml_type);
  if (!type) {
    const GgmlTypeLayout* layout = ggml_type_layout(t.ggml_type);
    throw Error("'" + f.name() + "': tensor " + t.name + " is of type " + (layout ? layout->name : "?") +
                ", which qkv does not read (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)");
  }
  if (want[0] % type->block != 0)
    throw Error("'" + f.name() + "': tensor " + t.name + " of type " + type->name + " has rows of " +
                std::to_string(want[0]) + " values, not a multiple of its block of " + std::to_string(type->block));
  return *type;
}

// Tensor t's `rows` rows of `width` weights all finite (a block type's:
// its scales), else an error naming the first row that is not.
void check_finite(const GgufFile& f, const GgufTensor& t, WeightType type, int64_t rows, int64_t width) {
  const uint64_t row_bytes = weight_bytes(type, width);
  int64_t first = rows;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (int64_t r = 0; r < rows; ++r)
    if (!all_finite(type, t.bytes.data() + static_cast<uint64_t>(r) * row_bytes, width)) first = std::min(first, r);
  if (first < rows)
    throw Error("'" + f.name() + "': tensor " + t.name + " holds a non-finite value in row " + std::to_string(first));
}

// The values of tensor `t` (`rows` rows of `width`, type checked) as
// float32 at `out`: its rows dequantized in parallel.
void dequantize_into(const GgufTensor& t, WeightType type, int64_t rows, int64_t width, float* out) {
  const uint64_t row_bytes = weight_bytes(type, width);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(type, t.bytes.data() + static_cast<uint64_t>(r) * row_bytes, out + r * width, width);
}

// Whether some 2-D tensor of the model is of a block type (a quantized
// file): its matrices are then held as stored. A file of float32, F16 or
// BF16 matrices only runs the float32 GEMMs, on its weights widened.
bool has_blocks(const GgufFile& f, const SourceMap& sources) {
  for (const auto& [param, list] : sources)
    for (const Source& s : list) {
      const GgufTensor* t = f.find_tensor(s.name);
      const WeightTypeInfo* type = t ? weight_type_from_ggml(t->ggml_type) : nullptr;
      if (type && type->block > 1 && t->shape.size() == 2) return true;
    }
  return false;
}

// Every parameter of `gpt` read from its sources; every tensor of the file
// must be read (one that is not would change the maths). With `quantized`
// the matrices and the embedding table are held as stored (the model
// computes with them: GptLoader::hold_matrices_quantized), else every
// tensor is dequantized into the model's float32 weights.
void read_weights(const GgufFile& f, const std::string& arch, GPT& gpt, const SourceMap& sources, bool quantized) {
  float* w = GptLoader::weights(gpt);
  // With the matrices held as stored, only the norms, biases and position
  // table are written here, a few KiB every few MiB: in 4 KiB pages, not
  // a 2 MiB page zeroed for each.
  if (quantized) written_sparsely(w, gpt.weights().size() * sizeof(float));
  const std::set<int64_t> matrices = GptLoader::bf16_matrix_offsets(gpt);
  auto held = [&](const ParamInfo& p) { return quantized && (matrices.count(p.offset) || p.name == "transformer.wte.weight"); };
  // A llama's q and k rows are held as the file orders them (the model puts
  // its products' columns back: GptLoader::hold_matrices_quantized), not
  // copied: unless q and k have biases, whose float rows would then need
  // the file's order too. Those are rearranged into `owned`, sized first so
  // that runs can point into it as it fills.
  const bool qk_paired = arch == "llama" && !gpt.config().qkv_biased();
  uint64_t owned_bytes = 0;
  for (const ParamInfo& p : gpt.params())
    if (held(p) && !qk_paired)
      for (const Source& s : sources.at(p.name))
        if (const GgufTensor* t = f.find_tensor(s.name); t && s.unpermute_heads) owned_bytes += t->bytes.size();
  std::vector<uint8_t> owned(owned_bytes);
  uint64_t owned_at = 0;
  std::map<int64_t, std::vector<Weight>> runs;
  Weight wte;
  std::set<std::string> read;
  for (const ParamInfo& p : gpt.params()) {
    const auto it = sources.find(p.name);
    if (it == sources.end()) throw Error("model: no GGUF tensor is mapped to " + p.name);
    const int64_t width = p.size / p.shape[0];
    int64_t at = 0;
    for (const Source& s : it->second) {
      const GgufTensor* t = f.find_tensor(s.name);
      if (!t) throw Error("'" + f.name() + "': the file has no tensor " + s.name + " (the model's " + p.name + ")");
      const Shape want = p.shape.size() == 1 ? Shape{s.rows} : Shape{width, s.rows};
      const WeightType type = checked_type(f, *t, want).type;
      check_finite(f, *t, type, s.rows, width);
      const auto* bytes = reinterpret_cast<const uint8_t*>(t->bytes.data());
      if (held(p)) {
        Weight run{type, s.rows, width, bytes};
        if (s.unpermute_heads && !qk_paired) {
          unpermute(bytes, owned.data() + owned_at, s.rows, s.unpermute_heads, run.row_bytes());
          run.data = owned.data() + owned_at;
          owned_at += t->bytes.size();
          f.release(t->bytes);  // read from the copy from now on: not resident twice
        }
        if (p.name == "transformer.wte.weight") wte = run;
        if (matrices.count(p.offset)) runs[p.offset].push_back(run);  // a tied head: wte's too
      } else {
        float* dst = w + p.offset + at * width;
        dequantize_into(*t, type, s.rows, width, dst);
        if (s.unpermute_heads) {
          const std::vector<float> in(dst, dst + s.rows * width);
          unpermute(reinterpret_cast<const uint8_t*>(in.data()), reinterpret_cast<uint8_t*>(dst), s.rows,
                    s.unpermute_heads, sizeof(float) * static_cast<uint64_t>(width));
        }
      }
      at += s.rows;
      read.insert(s.name);
    }
    if (at != p.shape[0]) throw Error("model: the sources of " + p.name + " do not make its rows");
  }
  for (const GgufTensor& t : f.tensors()) {
    if (read.count(t.name)) continue;
    if (t.name == "rope_freqs.weight" && arch == "llama") continue;  // read with the config (read_rope_factors)
    throw Error("'" + f.name() + "': tensor " + t.name + " is not part of qkv's " + arch +
                " model (it would change the maths)");
  }
  if (quantized) {
    GptLoader::hold_matrices_quantized(gpt, std::move(runs), wte, std::move(owned),
                                       {std::make_shared<const GgufFile>(f)}, qk_paired);
  }
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  if (std::filesystem::path(path).extension() == ".gguf") return true;
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

GgufModel load_model(const std::string& path, bool dequantize) {
  const GgufFile f = GgufFile::open(path);
  GgufModel m;
  m.architecture = f.get_string("general.architecture");
  if (m.architecture != "llama" && m.architecture != "qwen2" && m.architecture != "gpt2")
    throw Error("'" + path + "': metadata \"general.architecture\": " + in_quotes(m.architecture) +
                " is not supported (qkv runs: gpt2, llama, qwen2)");
  const GPTConfig c = read_config(f, m.architecture);
  m.tokenizer = std::make_shared<const BpeTokenizer>(BpeTokenizer::from_gguf(f));
  m.gpt = std::make_unique<GPT>(c);
  const SourceMap sources = source_map(c, m.architecture);
  read_weights(f, m.architecture, *m.gpt, sources, !dequantize && has_blocks(f, sources));
  return m;
}

}  // namespace qkv::gguf
