// bpe_gguf.cpp: the tokenizer of a GGUF file, read from its metadata as
// the tokenizer.json it stands for (as bpe_gpt2_files.cpp does for GPT-2's
// older files): its stages as JSON, its vocabulary and merges given to the
// reader as they are (bpe::VocabSource). Counts and ids in that JSON are
// unsigned literals (1u): the reader takes a count only as the unsigned
// number that parsing "1" gives. llama.cpp's converter writes a byte-level BPE
// tokenizer as:
//   tokenizer.ggml.model        "gpt2"
//   tokenizer.ggml.pre          the pre-tokenizer's name: "gpt-2" (GPT-2's
//                               split), "smollm" (a digit a piece, then
//                               GPT-2's split), "llama-bpe" (Llama 3's split),
//                               "qwen2" (Qwen2's: its NFC normalizer is
//                               not kept, as llama.cpp applies none)
//   tokenizer.ggml.tokens       every token, by id
//   tokenizer.ggml.merges       "left right", by rank
//   tokenizer.ggml.token_type   1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.{bos,eos}_token_id, add_bos_token, add_eos_token
// and a SentencePiece BPE tokenizer (Llama 2, TinyLlama, Mistral) as
//   tokenizer.ggml.model        "llama"
//   tokenizer.ggml.tokens       every piece, "▁" for a space, "<0xNN>" bytes
//   tokenizer.ggml.scores       each piece's score: SentencePiece merges the
//                               adjacent pair whose union scores highest
//   tokenizer.ggml.token_type   as above; the unknown piece is type 2
//   tokenizer.ggml.add_space_prefix   "▁" in front of the text (default on)
// which becomes the byte-fallback BPE of a Llama 2 tokenizer.json, its
// merges derived from the scores (spm_merges).
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/bpe/bpe_impl.h"
#include "text/bpe/bpe_pretokenize.h"
#include "qkv/error.h"
#include "qkv/gguf.h"

namespace qkv {
namespace {

using nlohmann::json;

constexpr int64_t kUnknown = 2, kControl = 3, kUserDefined = 4;

// The pre-tokenizer of a tokenizer.json for the name llama.cpp gives it,
// and whether its BPE model ignores merges (Llama 3's: a word in the
// vocabulary is one token).
json pre_tokenizer(const GgufFile& f, bool& ignore_merges) {
  const std::string key = "tokenizer.ggml.pre";
  if (!f.find(key))
    throw Error("'" + f.name() + "': metadata \"" + key + "\" is missing: qkv needs the name of the pre-tokenizer "
                "(gpt-2, llama-bpe, qwen2, smollm)");
  const std::string pre = f.get_string(key);
  ignore_merges = false;
  const json gpt2 = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  if (pre == "gpt-2") return gpt2;
  if (pre == "smollm")  // llama.cpp: \p{N} alone, then GPT-2's split
    return {{"type", "Sequence"},
            {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, gpt2})}};
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  if (llama3 || pre == "qwen2") {
    ignore_merges = llama3;
    const bpe::SplitRule rule = llama3 ? bpe::SplitRule::Llama3 : bpe::SplitRule::Qwen2;
    const json split = {{"type", "Split"},
                        {"pattern", {{"Regex", std::string(bpe::split_pattern(rule))}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", false}};
    return {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level})}};
  }
  throw Error("'" + f.name() + "': metadata \"" + key + "\": \"" + pre +
              "\" is not supported (gpt-2, llama-bpe, qwen2, smollm)");
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
  const json piece = json{{"SpecialToken", json{{"id", t}, {"type_id", 0u}}}};
  single.insert(front ? single.begin() : single.end(), piece);
  specials[t] = {{"id", t}, {"ids", json::array({static_cast<uint32_t>(id)})}, {"tokens", json::array({t})}};
}

// The merges of a SentencePiece BPE vocabulary, as the tokenizers library
// derives them from a SentencePiece model: every split of a piece into two
// pieces of the vocabulary is a merge, ranked by the whole piece's score
// (highest first; equal scores by id), a piece's splits by their ids. BPE
// over these ranks merges what SentencePiece merges: the adjacent pair
// whose union scores highest. A piece holding a space cannot be written as
// a merge ("left right") and is left out (SentencePiece writes "▁").
std::vector<std::pair<std::string, std::string>> spm_merges(const std::vector<std::string>& tokens,
                                                            const std::vector<double>& scores) {
  std::unordered_map<std::string, size_t> id_of;
  for (size_t id = 0; id < tokens.size(); ++id) id_of.emplace(tokens[id], id);
  std::vector<size_t> order(tokens.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::pair<size_t, size_t>> local;
  for (const size_t id : order) {
    const std::string& t = tokens[id];
    if (t.find(' ') != std::string::npos) continue;
    local.clear();
    for (size_t at = 1; at < t.size(); ++at) {
      if ((static_cast<unsigned char>(t[at]) & 0xC0) == 0x80) continue;  // inside a character
      const auto l = id_of.find(t.substr(0, at)), r = id_of.find(t.substr(at));
      if (l != id_of.end() && r != id_of.end()) local.emplace_back(l->second, r->second);
    }
    std::sort(local.begin(), local.end());
    for (const auto& [l, r] : local) merges.emplace_back(tokens[l], tokens[r]);
  }
  return merges;
}

// The tokenizer.json parts of a SentencePiece vocabulary: Llama 2's
// normalizer ("▁" in front, spaces as "▁") and decoder; the model's byte
// fallback, unknown piece and the merges its scores imply.
void spm_parts(const GgufFile& f, const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
               json& spec, bpe::VocabSource& model) {
  const std::vector<double>& scores = f.get_floats("tokenizer.ggml.scores");
  if (scores.size() != tokens.size())
    throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.scores\" has " + std::to_string(scores.size()) +
                " entries, tokenizer.ggml.tokens " + std::to_string(tokens.size()));
  const bool prefix = flag_or(f, "tokenizer.ggml.add_space_prefix", true);
  const json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  json norm = json::array();
  if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
  norm.push_back(replace_space);
  spec["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
  spec["pre_tokenizer"] = nullptr;
  json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1u}, {"stop", 0u}});
  spec["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  model.merges = spm_merges(tokens, scores);
  model.byte_fallback = true;
  model.fuse_unk = true;
  for (size_t id = 0; id < tokens.size(); ++id)
    if (types[id] == kUnknown) {
      model.unk = tokens[id];
      break;
    }
}

}  // namespace

BpeTokenizer BpeTokenizer::from_gguf(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama")
    throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.model\": \"" + model +
                "\" is not supported (qkv reads \"gpt2\", byte-level BPE, and \"llama\", SentencePiece BPE)");
  const bool spm = model == "llama";
  bool ignore_merges = false;
  const json pre = spm ? json(nullptr) : pre_tokenizer(f, ignore_merges);
  const std::vector<std::string>& tokens = f.get_strings("tokenizer.ggml.tokens");
  std::vector<int64_t> types(tokens.size(), 1);
  if (f.find("tokenizer.ggml.token_type")) {
    types = f.get_ints("tokenizer.ggml.token_type");
    if (types.size() != tokens.size())
      throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.token_type\" has " + std::to_string(types.size()) +
                  " entries, tokenizer.ggml.tokens " + std::to_string(tokens.size()));
  }
  bpe::VocabSource vocab;
  vocab.ignore_merges = ignore_merges;
  vocab.vocab.reserve(tokens.size());
  std::unordered_map<std::string_view, size_t> first;  // llama.cpp refuses a token listed twice too
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (const auto [it, fresh] = first.emplace(tokens[id], id); !fresh)
      throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.tokens\": \"" + tokens[id] + "\" is listed twice (ids " +
                  std::to_string(it->second) + " and " + std::to_string(id) + ")");
    vocab.vocab.emplace_back(tokens[id], static_cast<int32_t>(id));
    if (types[id] == kControl || types[id] == kUserDefined) {
      bpe::AddedToken& a = vocab.added.emplace_back();
      a.content = tokens[id];
      a.id = static_cast<int32_t>(id);
      a.normalized = types[id] == kUserDefined;
      a.special = types[id] == kControl;
    }
  }
  if (!spm) {
    const std::vector<std::string>& merges = f.get_strings("tokenizer.ggml.merges");
    vocab.merges.resize(merges.size());
    for (size_t i = 0; i < merges.size(); ++i)
      if (!bpe::split_merge(merges[i], vocab.merges[i].first, vocab.merges[i].second))
        throw Error("'" + f.name() + "': metadata \"tokenizer.ggml.merges\"[" + std::to_string(i) + "]: \"" +
                    merges[i] + "\" is not two tokens separated by one space");
  }
  const int32_t bos = token_id(f, "tokenizer.ggml.bos_token_id", tokens.size());
  const int32_t eos = token_id(f, "tokenizer.ggml.eos_token_id", tokens.size());
  json single = json::array({json{{"Sequence", json{{"id", "A"}, {"type_id", 0u}}}}}), specials = json::object();
  if (flag_or(f, "tokenizer.ggml.add_bos_token", ignore_merges || spm) && bos >= 0)
    template_token(tokens, bos, single, specials, true);
  if (flag_or(f, "tokenizer.ggml.add_eos_token", false) && eos >= 0)
    template_token(tokens, eos, single, specials, false);
  json spec = {{"version", "1.0"},
               {"pre_tokenizer", pre},
               {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                            {"use_regex", true}}}};
  if (spm) spm_parts(f, tokens, types, spec, vocab);
  if (!specials.empty())
    spec["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  auto impl = std::make_shared<Impl>();
  bpe::read_tokenizer_json(spec, std::move(vocab), "'" + f.name() + "': the tokenizer metadata", *impl);
  impl->bos = bos;
  impl->eos = eos;
  return BpeTokenizer(std::move(impl));
}

}  // namespace qkv
