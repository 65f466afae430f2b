// sentence.cpp: sentence-transformers' Pooling and Normalize modules.
#include "model/hf/sentence.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/json_strict.h"
#include "model/hf/hf_folder.h"
#include "qkv/error.h"

namespace qkv::hf {
namespace {

using nlohmann::json;

bool flag(const json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean()) throw Error("'" + file + "': " + key + " must be true or false, found " + json_excerpt(j[key]));
  return j[key].get<bool>();
}

Pooling::Mode pooling_mode(const std::string& file) {
  const json j = read_json(file, 16);
  if (!j.is_object()) throw Error("'" + file + "': expected a JSON object");
  for (const char* unsupported : {"pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
    if (flag(j, unsupported, file)) throw Error("'" + file + "': " + unsupported + " is not supported");
  std::vector<Pooling::Mode> modes;
  if (flag(j, "pooling_mode_cls_token", file)) modes.push_back(Pooling::Mode::cls);
  if (flag(j, "pooling_mode_mean_tokens", file)) modes.push_back(Pooling::Mode::mean);
  if (flag(j, "pooling_mode_max_tokens", file)) modes.push_back(Pooling::Mode::max);
  if (flag(j, "pooling_mode_mean_sqrt_len_tokens", file)) modes.push_back(Pooling::Mode::mean_sqrt_len);
  if (modes.size() != 1)
    throw Error("'" + file + "': expected exactly one pooling_mode_* true (cls_token, mean_tokens, "
                "max_tokens, mean_sqrt_len_tokens), found " + std::to_string(modes.size()));
  return modes[0];
}

}  // namespace

SentenceModules read_sentence_modules(const std::string& dir, int64_t context,
                                      const std::vector<std::string>& specials) {
  SentenceModules m;
  m.max_length = context;
  // Refused here rather than at the first text embedded: every text needs
  // room for the special tokens, as the tokenizer adds them.
  std::string names;
  for (const std::string& s : specials) names += (names.empty() ? "" : " and ") + s;
  const auto need = [&](int64_t length, const std::string& file, const char* field) {
    if (length < static_cast<int64_t>(specials.size()))
      throw Error("'" + file + "': " + field + " " + std::to_string(length) + " leaves no room for " + names +
                  ", which the tokenizer adds to every text: it must be at least " + std::to_string(specials.size()));
  };
  need(context, dir + "/config.json", "max_position_embeddings");
  const std::string bert_cfg = dir + "/sentence_bert_config.json";
  if (std::filesystem::exists(bert_cfg)) {
    const json j = read_json(bert_cfg, 16);
    if (!j.is_object()) throw Error("'" + bert_cfg + "': expected a JSON object");
    const int64_t n = int_field_or(j, "max_seq_length", bert_cfg, 1, context);
    need(n, bert_cfg, "max_seq_length");
    m.max_length = std::min(context, n);
    if (flag(j, "do_lower_case", bert_cfg))
      throw Error("'" + bert_cfg + "': do_lower_case true is not supported (the tokenizer's normalizer lowercases)");
  }
  const std::string modules = dir + "/modules.json";
  if (!std::filesystem::exists(modules)) return m;
  const json j = read_json(modules, 16);
  if (!j.is_array()) throw Error("'" + modules + "': expected a list of modules");
  for (const json& mod : j) {
    const std::string type = mod.is_object() ? string_field_or(mod, "type", modules, "") : "";
    const std::string path = mod.is_object() ? string_field_or(mod, "path", modules, "") : "";
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Pooling") {
      if (path.find("..") != std::string::npos) throw Error("'" + modules + "': a module path leaves the folder: " + path);
      m.pooling.mode = pooling_mode(dir + "/" + path + "/config.json");
    } else if (type == "sentence_transformers.models.Normalize") {
      m.pooling.normalize = true;
    } else {
      throw Error("'" + modules + "': module type \"" + type +
                  "\" is not supported (Transformer, Pooling, Normalize)");
    }
  }
  return m;
}

void pool(float* out, const float* h, int64_t T, int64_t C, const Pooling& p) {
  std::vector<double> acc(static_cast<size_t>(C), 0.0);
  switch (p.mode) {
    case Pooling::Mode::cls:
      std::copy_n(h, C, acc.begin());
      break;
    case Pooling::Mode::max:
      std::copy_n(h, C, acc.begin());
      for (int64_t t = 1; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) acc[c] = std::max(acc[c], static_cast<double>(h[t * C + c]));
      break;
    case Pooling::Mode::mean:
    case Pooling::Mode::mean_sqrt_len: {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) acc[c] += h[t * C + c];
      const double d = p.mode == Pooling::Mode::mean ? static_cast<double>(T) : std::sqrt(static_cast<double>(T));
      for (double& a : acc) a /= d;
      break;
    }
  }
  double scale = 1.0;
  if (p.normalize) {
    double ss = 0.0;
    for (const double a : acc) ss += a * a;
    scale = 1.0 / std::max(std::sqrt(ss), 1e-12);  // torch.nn.functional.normalize's eps
  }
  for (int64_t c = 0; c < C; ++c) out[c] = static_cast<float>(acc[c] * scale);
}

}  // namespace qkv::hf
