#include "qkv/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/json_strict.h"
#include "model/param_tensors.h"
#include "qkv/safetensors.h"

namespace qkv {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "': missing or unreadable");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t require_int(const json& j, const char* key, const std::string& name) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw Error("'" + name + "': expected an integer '" + key + "'");
  return j[key].get<int64_t>();
}

// The number of weights build_params() makes for `c`, in double so that a
// huge config cannot overflow: compared with the weights file's size before
// anything is allocated for the config. For qkv's own models only (their
// config.json has neither head_size nor Llama's blocks: config_to_json).
double param_count(const GPTConfig& c) {
  const double C = static_cast<double>(c.embd), L = static_cast<double>(c.layers);
  const double hs = static_cast<double>(c.head_dim());
  const double qkv_out = static_cast<double>(c.heads + 2 * c.kv_heads) * hs;
  const double b = c.bias ? 1.0 : 0.0;
  const double layer = (1.0 + b) * C                  // ln_1
                       + qkv_out * C + b * qkv_out    // c_attn
                       + C * C + b * C                // attn.c_proj
                       + (1.0 + b) * C                // ln_2
                       + 4.0 * C * C + b * 4.0 * C    // c_fc
                       + 4.0 * C * C + b * C;         // mlp.c_proj
  return static_cast<double>(c.vocab) * C + (c.rope ? 0.0 : static_cast<double>(c.context) * C) +
         L * layer + (1.0 + b) * C;
}

}  // namespace

std::string config_to_json(const GPTConfig& c) {
  // qkv's own config.json describes the models qkv trains; a checkpoint's
  // architecture (BERT, ...) is described by its own folder.
  const bool nanogpt = c.trainable() && !c.post_norm && c.causal && c.tied_head && !c.rms_norm && !c.swiglu && !c.attn_bias &&
                       !c.qkv_bias && !c.mlp_bias && c.head_size == 0 && c.window == 0 && c.rope_theta == 10000.0 &&
                       c.rope_scaling.kind == GPTConfig::RopeScaling::Kind::none;
  if (!nanogpt || c.ffn != 0 || c.norm_eps != GPTConfig{}.norm_eps)
    throw Error("model config: qkv saves GPT models (pre-norm, causal, ln_f, tied head, ffn 4 * "
                "embd, norm_eps 1e-5); this model is read from its own folder");
  json j = {{"vocab", c.vocab},   {"context", c.context}, {"layers", c.layers},
            {"heads", c.heads},   {"kv_heads", c.kv_heads}, {"embd", c.embd},
            {"rope", c.rope},     {"bias", c.bias}, {"gelu", c.gelu == nn::Gelu::exact ? "exact" : "tanh"},
            {"arch", "gpt"}};
  return j.dump(2) + "\n";
}

GPTConfig config_from_json(const std::string& text, const std::string& name) {
  json j;
  try {
    // Strict: a repeated key is refused, not silently resolved to its last value.
    j = parse_json_strict(text, 2);
  } catch (const Error& e) {
    throw Error("'" + name + "': " + e.what());
  }
  if (!j.is_object()) throw Error("'" + name + "': expected a JSON object");
  // A key qkv does not know (a typo, another program's config) would be
  // ignored silently; refuse it by name instead.
  static const char* const kKeys[] = {"vocab", "context", "layers", "heads", "kv_heads",
                                      "embd",  "rope",    "bias",   "gelu",  "arch"};
  for (const auto& [key, value] : j.items())
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      throw Error("'" + name + "': unknown key \"" + key +
                  "\" (qkv's config has vocab, context, layers, heads, kv_heads, embd, rope, bias, "
                  "gelu, arch)");
  GPTConfig c;
  c.vocab = require_int(j, "vocab", name);
  c.context = require_int(j, "context", name);
  c.layers = require_int(j, "layers", name);
  c.heads = require_int(j, "heads", name);
  c.kv_heads = require_int(j, "kv_heads", name);
  c.embd = require_int(j, "embd", name);
  if (!j.contains("rope") || !j["rope"].is_boolean())
    throw Error("'" + name + "': expected a boolean 'rope'");
  c.rope = j["rope"].get<bool>();
  if (!j.contains("bias") || !j["bias"].is_boolean())
    throw Error("'" + name + "': expected a boolean 'bias'");
  c.bias = j["bias"].get<bool>();
  // Checkpoints written before the GELU was a choice have no "gelu": they
  // were trained with the tanh form, so they load as tanh.
  c.gelu = nn::Gelu::tanh;
  if (j.contains("gelu")) {
    const json& g = j["gelu"];
    if (g.is_string() && g.get<std::string>() == "exact") c.gelu = nn::Gelu::exact;
    else if (!g.is_string() || g.get<std::string>() != "tanh")
      throw Error("'" + name + "': expected 'gelu' \"exact\" or \"tanh\", found " + json_excerpt(g));
  }
  if (!j.contains("arch") || !j["arch"].is_string() || j["arch"].get<std::string>() != "gpt")
    throw Error("'" + name + "': expected 'arch' \"gpt\" (the only architecture qkv builds), found " +
                (j.contains("arch") ? j["arch"].dump() : std::string("none")));
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("'" + name + "': " + e.what());
  }
  return c;
}

// The tensors of one model as safetensors wants them: named views of copies
// of the flat weight buffer.
std::vector<Tensor> param_tensors(const GPT& model) {
  std::vector<Tensor> tensors;
  tensors.reserve(model.params().size());
  for (const ParamInfo& p : model.params()) {
    Tensor t(DType::f32, p.shape);
    std::copy_n(model.weights().data() + p.offset, p.size, t.data<float>());
    tensors.push_back(std::move(t));
  }
  return tensors;
}

void weights_from_tensors(float* weights, const std::vector<ParamInfo>& params,
                          const std::map<std::string, Tensor>& tensors, const std::string& source) {
  for (const ParamInfo& p : params) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) throw Error("'" + source + "': missing tensor '" + p.name + "'");
    if (it->second.dtype() != DType::f32 || it->second.shape() != p.shape)
      throw Error("'" + source + "': tensor '" + p.name + "' should be float32 " +
                  shape_str(p.shape) + ", found " + dtype_name(it->second.dtype()) + " " +
                  shape_str(it->second.shape()));
    const float* src = it->second.data<float>();
    for (int64_t i = 0; i < p.size; ++i)
      if (!std::isfinite(src[i]))
        throw Error("'" + source + "': tensor '" + p.name + "' holds a non-finite value");
    std::copy_n(src, p.size, weights + p.offset);
  }
}

namespace {

// The model's files (config.json, vocab.json, model.safetensors) staged.
void stage_model(FileSet& files, const std::string& dir, const GPT& model, const CharTokenizer& tok,
                 const std::vector<Tensor>& tensors) {
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (size_t i = 0; i < tensors.size(); ++i) named.emplace_back(model.params()[i].name, &tensors[i]);
  const std::string cfg = config_to_json(model.config());
  files.stage(dir + "/config.json", {cfg});
  files.stage(dir + "/vocab.json", {tok.to_json()});
  stage_safetensors(files, dir + "/model.safetensors", named, {{"format", "pt"}, {"qkv_config", cfg}});
}

}  // namespace

void save_model(const std::string& dir, const GPT& model, const CharTokenizer& tok) {
  const std::vector<Tensor> tensors = param_tensors(model);
  FileSet files;
  stage_model(files, dir, model, tok, tensors);
  files.commit();
}

void save_checkpoint(const std::string& dir, const GPT& model, const CharTokenizer& tok,
                     AdamW& opt, int64_t next_iter, const std::string& options_json) {
  const std::vector<Tensor> tensors = param_tensors(model);
  const int64_t n = model.num_params();
  Tensor w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n});
  std::copy(model.weights().begin(), model.weights().end(), w.data<float>());
  std::copy(opt.m().begin(), opt.m().end(), m.data<float>());
  std::copy(opt.v().begin(), opt.v().end(), v.data<float>());
  // Every file is written in full before any replaces its predecessor: a
  // full disk or an unwritable file leaves the previous checkpoint whole.
  FileSet files;
  stage_model(files, dir, model, tok, tensors);
  stage_safetensors(files, dir + "/train_state.safetensors",
                    {{"weights", &w}, {"adam.m", &m}, {"adam.v", &v}},
                    {{"next_iter", std::to_string(next_iter)},
                     {"adam_steps", std::to_string(opt.steps())},
                     {"options", options_json}});
  files.commit();  // the resume point last, as the commit record
}

namespace {

// Whether `path` is a config.json qkv wrote: a JSON object with "arch"
// (config_to_json). A file too large for a config is not one.
bool is_qkv_config(const std::filesystem::path& path) {
  constexpr std::uintmax_t kMaxBytes = 1 << 20;
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxBytes) return false;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, false);
  return j.is_object() && j.contains("arch") && j["arch"].is_string();
}

// Whether `path` is one of the files named in `reads`.
bool is_read(const std::filesystem::path& path, const std::vector<std::string>& reads) {
  for (const std::string& r : reads) {
    std::error_code ec;
    if (std::filesystem::equivalent(path, r, ec)) return true;
  }
  return false;
}

}  // namespace

void refuse_foreign_directory(const std::string& dir, const std::vector<std::string>& reads) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;  // made afresh, or the writer says what is in the way
  std::vector<std::string> foreign;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kTrainLockName || (name == "config.json" && is_qkv_config(it->path()))) return;
    if (name.rfind(kTempPrefix, 0) == 0 || is_read(it->path(), reads)) continue;
    foreign.push_back(name);
  }
  if (foreign.empty()) return;
  std::sort(foreign.begin(), foreign.end());
  constexpr size_t kShown = 3;
  std::string held;
  for (size_t i = 0; i < std::min(kShown, foreign.size()); ++i)
    held += (i == 0 ? "'" : ", '") + foreign[i] + "'";
  if (foreign.size() > kShown) held += " and " + std::to_string(foreign.size() - kShown) + " more";
  throw Error("out_dir: '" + dir + "' is not empty and was not made by qkv (it holds " + held +
              "); write into a new or empty directory, or pass force to write there anyway, "
              "replacing files of the names qkv writes");
}

namespace {

// model.safetensors records the config it was written with (qkv_config);
// config.json is only a readable copy. One edited to disagree (heads 2 -> 4
// keeps every tensor's shape) would load and silently change the logits, so
// the weights' own record is the truth and any field that differs is named.
void check_config_matches_weights(const GPTConfig& config, const std::string& dir) {
  const std::string wpath = dir + "/model.safetensors";
  const auto meta = read_safetensors_metadata(wpath);
  const auto rec = meta.find("qkv_config");
  if (rec == meta.end()) return;  // written by another program: config.json alone describes it
  const GPTConfig recorded = config_from_json(rec->second, wpath + " (qkv_config)");
  const json want = json::parse(config_to_json(recorded)), have = json::parse(config_to_json(config));
  std::string diffs;
  for (const auto& [key, value] : want.items()) {
    const auto it = have.find(key);
    if (it == have.end() || *it != value)
      diffs += std::string(diffs.empty() ? "" : ", ") + key + " " +
               (it == have.end() ? std::string("missing") : it->dump()) + " (weights: " + value.dump() + ")";
  }
  if (!diffs.empty())
    throw Error("'" + dir + "/config.json': disagrees with the config recorded in '" + wpath +
                "': " + diffs + "; the weights were trained with theirs");
}

}  // namespace

LoadedModel load_model(const std::string& dir) {
  if (dir.empty()) throw Error("model directory: expected a path, found an empty string");
  LoadedModel m{config_from_json(read_text(dir + "/config.json"), dir + "/config.json"),
                CharTokenizer::from_json(read_text(dir + "/vocab.json"), dir + "/vocab.json"),
                {}};
  const std::string wpath = dir + "/model.safetensors";
  if (m.tokenizer.vocab_size() != m.config.vocab)
    throw Error("'" + dir + "/vocab.json': " + std::to_string(m.tokenizer.vocab_size()) +
                " tokens, but config.json says vocab " + std::to_string(m.config.vocab));
  const std::map<std::string, Tensor> tensors = read_safetensors(wpath);
  // The config decides what is allocated below; a config whose weights could
  // not be in the file (context: 1e7, say) is refused before that, by size
  // alone (the file itself is whole by now: its header's offsets fit it).
  std::error_code ec;
  const double file_bytes = static_cast<double>(std::filesystem::file_size(wpath, ec));
  const double need = 4.0 * param_count(m.config);
  if (!ec && need > file_bytes) {
    char sizes[96];
    std::snprintf(sizes, sizeof sizes, "%.0f float32 weights (%.4g GiB)", need / 4.0,
                  need / (1024.0 * 1024.0 * 1024.0));
    throw Error("'" + dir + "/config.json': describes a model of " + sizes + ", but '" + wpath +
                "' has only " + std::to_string(static_cast<uint64_t>(file_bytes)) + " bytes");
  }
  check_config_matches_weights(m.config, dir);
  const GPT shape_only(m.config);
  m.weights.assign(static_cast<size_t>(shape_only.num_params()), 0.0f);
  weights_from_tensors(m.weights.data(), shape_only.params(), tensors, wpath);
  if (tensors.size() != shape_only.params().size())
    throw Error("'" + wpath + "': " + std::to_string(tensors.size()) + " tensors, expected " +
                std::to_string(shape_only.params().size()) + " for this config");
  return m;
}

void set_weights(GPT& model, const std::vector<float>& weights) {
  if (static_cast<int64_t>(weights.size()) != model.num_params())
    throw Error("set_weights: " + std::to_string(weights.size()) + " weights for a model of " +
                std::to_string(model.num_params()));
  std::copy(weights.begin(), weights.end(), model.weights().begin());
}

TrainState load_train_state(const std::string& dir) {
  const std::string path = dir + "/train_state.safetensors";
  const auto meta = read_safetensors_metadata(path);
  const auto tensors = read_safetensors(path);
  TrainState s;
  auto meta_int = [&](const char* key) {
    auto it = meta.find(key);
    if (it == meta.end()) throw Error("'" + path + "': metadata lacks '" + key + "'");
    try {
      size_t used = 0;
      const long long x = std::stoll(it->second, &used);
      if (used != it->second.size() || x < 0) throw std::invalid_argument(key);
      return static_cast<int64_t>(x);
    } catch (const std::exception&) {
      throw Error("'" + path + "': metadata '" + key + "' is not a count: '" + it->second + "'");
    }
  };
  s.next_iter = meta_int("next_iter");
  s.adam_steps = meta_int("adam_steps");
  auto opts = meta.find("options");
  if (opts == meta.end()) throw Error("'" + path + "': metadata lacks 'options'");
  s.options_json = opts->second;
  for (auto [name, dst] : {std::pair{"weights", &s.weights}, std::pair{"adam.m", &s.m},
                           std::pair{"adam.v", &s.v}}) {
    auto it = tensors.find(name);
    if (it == tensors.end() || it->second.dtype() != DType::f32 || it->second.rank() != 1)
      throw Error("'" + path + "': expected a float32 vector '" + name + "'");
    const float* src = it->second.data<float>();
    for (int64_t i = 0; i < it->second.numel(); ++i)
      if (!std::isfinite(src[i])) throw Error("'" + path + "': '" + name + "' holds a non-finite value");
    dst->assign(src, src + it->second.numel());
  }
  if (s.m.size() != s.weights.size() || s.v.size() != s.weights.size())
    throw Error("'" + path + "': 'weights', 'adam.m' and 'adam.v' differ in length");
  return s;
}

}  // namespace qkv
