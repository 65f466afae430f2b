// bpe_gguf.cpp: the tokenizer of a GGUF file, read from its metadata by
// writing the tokenizer.json it stands for (as bpe_gpt2_files.cpp does for
// GPT-2's older files). llama.cpp's converter writes a byte-level BPE
// tokenizer as:
//   tokenizer.ggml.model        "gpt2"
//   tokenizer.ggml.pre          the pre-tokenizer's name: "gpt-2" (GPT-2's
//                               split), "llama-bpe" (Llama 3's split)
//   tokenizer.ggml.tokens       every token, by id
//   tokenizer.ggml.merges       "left right", by rank
//   tokenizer.ggml.token_type   1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.{bos,eos}_token_id, add_bos_token, add_eos_token
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/bpe/bpe_impl.h"
#include "model/bpe/bpe_pretokenize.h"
#include "qkv/error.h"
#include "qkv/gguf.h"

namespace qkv {
namespace {

using nlohmann::json;

constexpr int64_t kControl = 3, kUserDefined = 4;

// The pre-tokenizer of a tokenizer.json for the name llama.cpp gives it,
// and whether its BPE model ignores merges (Llama 3's: a word in the
// vocabulary is one token).
json pre_tokenizer(const GgufFile& f, bool& ignore_merges) {
  const std::string key = "tokenizer.ggml.pre";
  if (!f.find(key))
    throw Error("'" + f.name() + "': metadata \"" + key + "\" is missing: qkv needs the name of the pre-tokenizer "
                "(gpt-2, llama-bpe)");
  const std::string pre = f.get_string(key);
  ignore_merges = false;
  if (pre == "gpt-2")
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    ignore_merges = true;
    const json split = {{"type", "Split"},
                        {"pattern", {{"Regex", std::string(bpe::split_pattern(bpe::SplitRule::Llama3))}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", false}};
    return {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}};
  }
  throw Error("'" + f.name() + "': metadata \"" + key + "\": \"" + pre +
              "\" is not supported (gpt-2, llama-bpe)");
}

// Token id `key` of the metadata, or -1 when absent; an id outside the
// token list is an error naming the key.
int32_t token_id(const GgufFile& f, const std::string& key, size_t tokens) {
  if (!f.find(key)) return -1;
  const int64_t id = f.get_int(key);
  if (id < 0 || id >= static_cast<int64_t>(tokens))
    throw Error("'" + f.name() + "': metadata \"" + key + "\": " + std::to_string(id) +
                " is not an id of tokenizer.ggml.tokens [0, " + std::to_string(tokens) + ")");
  return static_cast<int32_t>(id);
}

bool flag_or(const GgufFile& f, const std::string& key, bool fallback) {
  return f.find(key) ? f.get_bool(key) : fallback;
}

// The special token `id` in a TemplateProcessing's tables.
void template_token(const std::vector<std::string>& tokens, int32_t id, json& single, json& specials, bool front) {
  const std::string& t = tokens[static_cast<size_t>(id)];
  const json piece = json{{"SpecialToken", json{{"id", t}, {"type_id", 0}}}};
  single.insert(front ? single.begin() : single.end(), piece);
  specials[t] = {{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
}

}  // namespace

BpeTokenizer BpeTokenizer::from_gguf(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.model\": \"" + model +
                "\" is not supported (qkv reads \"gpt2\", byte-level BPE)");
  bool ignore_merges = false;
  const json pre = pre_tokenizer(f, ignore_merges);
  const std::vector<std::string>& tokens = f.get_strings("tokenizer.ggml.tokens");
  std::vector<int64_t> types(tokens.size(), 1);
  if (f.find("tokenizer.ggml.token_type")) {
    types = f.get_ints("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.token_type\" has " + std::to_string(types.size()) +
                  " entries, tokenizer.ggml.tokens " + std::to_string(tokens.size()));
  }
  json vocab = json::object(), added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (vocab.contains(tokens[id])) continue;  // a repeated token: its first id, the rest have no text
    vocab[tokens[id]] = id;
    if (types[id] == kControl || types[id] == kUserDefined)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", types[id] == kUserDefined},
                       {"special", types[id] == kControl}});
  }
  json merges = json::array();
  for (const std::string& m : f.get_strings("tokenizer.ggml.merges")) merges.push_back(m);
  const int32_t bos = token_id(f, "tokenizer.ggml.bos_token_id", tokens.size());
  const int32_t eos = token_id(f, "tokenizer.ggml.eos_token_id", tokens.size());
  json single = json::array({json{{"Sequence", json{{"id", "A"}, {"type_id", 0}}}}}), specials = json::object();
  if (flag_or(f, "tokenizer.ggml.add_bos_token", ignore_merges) && bos >= 0)
    template_token(tokens, bos, single, specials, true);
  if (flag_or(f, "tokenizer.ggml.add_eos_token", false) && eos >= 0)
    template_token(tokens, eos, single, specials, false);
  json spec = {{"version", "1.0"},
               {"added_tokens", added},
               {"pre_tokenizer", pre},
               {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                            {"use_regex", true}}},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}}};
  if (!specials.empty())
    spec["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  auto impl = std::make_shared<Impl>();
  bpe::read_tokenizer_json(spec.dump(), "'" + f.name() + "': the tokenizer metadata", *impl);
  impl->bos = bos;
  impl->eos = eos;
  return BpeTokenizer(std::move(impl));
}

}  // namespace qkv
