#include "qkv/checkpoint.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/json_strict.h"
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

}  // namespace

std::string config_to_json(const GPTConfig& c) {
  json j = {{"vocab", c.vocab},   {"context", c.context}, {"layers", c.layers},
            {"heads", c.heads},   {"kv_heads", c.kv_heads}, {"embd", c.embd},
            {"rope", c.rope},     {"bias", c.bias}, {"arch", "gpt"}};
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
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("'" + name + "': " + e.what());
  }
  return c;
}

void save_model(const std::string& dir, const GPT& model, const CharTokenizer& tok) {
  std::vector<Tensor> tensors;
  tensors.reserve(model.params().size());
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (const ParamInfo& p : model.params()) {
    Tensor t(DType::f32, p.shape);
    std::copy_n(model.weights().data() + p.offset, p.size, t.data<float>());
    tensors.push_back(std::move(t));
  }
  for (size_t i = 0; i < tensors.size(); ++i) named.emplace_back(model.params()[i].name, &tensors[i]);
  const std::string cfg = config_to_json(model.config());
  write_file_atomic(dir + "/config.json", {cfg});
  write_file_atomic(dir + "/vocab.json", {tok.to_json()});
  write_safetensors(dir + "/model.safetensors", named, {{"format", "pt"}, {"qkv_config", cfg}});
}

LoadedModel load_model(const std::string& dir) {
  LoadedModel m{config_from_json(read_text(dir + "/config.json"), dir + "/config.json"),
                CharTokenizer::from_json(read_text(dir + "/vocab.json"), dir + "/vocab.json"),
                {}};
  const std::string wpath = dir + "/model.safetensors";
  if (m.tokenizer.vocab_size() != m.config.vocab)
    throw Error("'" + dir + "/vocab.json': " + std::to_string(m.tokenizer.vocab_size()) +
                " tokens, but config.json says vocab " + std::to_string(m.config.vocab));
  const std::map<std::string, Tensor> tensors = read_safetensors(wpath);
  const GPT shape_only(m.config);
  m.weights.assign(static_cast<size_t>(shape_only.num_params()), 0.0f);
  for (const ParamInfo& p : shape_only.params()) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) throw Error("'" + wpath + "': missing tensor '" + p.name + "'");
    if (it->second.dtype() != DType::f32 || it->second.shape() != p.shape)
      throw Error("'" + wpath + "': tensor '" + p.name + "' should be float32 " +
                  shape_str(p.shape) + ", found " + dtype_name(it->second.dtype()) + " " +
                  shape_str(it->second.shape()));
    const float* src = it->second.data<float>();
    for (int64_t i = 0; i < p.size; ++i)
      if (!std::isfinite(src[i]))
        throw Error("'" + wpath + "': tensor '" + p.name + "' holds a non-finite value");
    std::copy_n(src, p.size, m.weights.data() + p.offset);
  }
  if (tensors.size() != shape_only.params().size())
    throw Error("'" + wpath + "': " + std::to_string(tensors.size()) + " tensors, expected " +
                std::to_string(shape_only.params().size()) + " for this config");
  return m;
}

void set_weights(GPT& model, const std::vector<float>& weights) {
  if (static_cast<int64_t>(weights.size()) != model.num_params())
    throw Error("set_weights: " + std::to_string(weights.size()) + " weights for a model of " +
                std::to_string(model.num_params()));
  model.weights() = weights;
}

void save_train_state(const std::string& dir, const GPT& model, AdamW& opt, int64_t next_iter,
                      const std::string& options_json) {
  const int64_t n = model.num_params();
  Tensor w(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n});
  std::copy(model.weights().begin(), model.weights().end(), w.data<float>());
  std::copy(opt.m().begin(), opt.m().end(), m.data<float>());
  std::copy(opt.v().begin(), opt.v().end(), v.data<float>());
  write_safetensors(dir + "/train_state.safetensors",
                    {{"weights", &w}, {"adam.m", &m}, {"adam.v", &v}},
                    {{"next_iter", std::to_string(next_iter)},
                     {"adam_steps", std::to_string(opt.steps())},
                     {"options", options_json}});
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
