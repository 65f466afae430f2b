// WordPieceTokenizer::from_json: a Hugging Face tokenizer.json, read
// strictly. Each part of the pipeline is checked against what qkv
// implements; anything else is refused by the name of its field, never
// tokenized some other way.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>

#include "io/json_strict.h"
#include "text/template_processing.h"
#include "text/utf8.h"
#include "qkv/error.h"
#include "qkv/wordpiece.h"

namespace qkv {
namespace {

using nlohmann::json;

// Errors as "'NAME': FIELD: why".
struct Reader {
  std::string name;

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw Error("'" + name + "': " + field + ": " + why);
  }
  const json& object(const json& j, const std::string& field) const {
    if (!j.is_object()) fail(field, std::string("expected a JSON object, found a JSON ") + j.type_name());
    return j;
  }
  // Refuses keys outside `known`: a setting qkv would not apply changes the ids.
  void only_keys(const json& j, const std::string& field, std::initializer_list<const char*> known) const {
    for (const auto& item : j.items()) {
      const std::string& key = item.key();  // a name, not a structured binding: clang 14's lambdas cannot capture those
      if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
        fail(field, "unexpected key " + json_excerpt(json(key), 40) + " (qkv does not implement it)");
    }
  }
  const json& at(const json& j, const std::string& field, const char* key) const {
    if (!j.contains(key)) fail(field, std::string("missing \"") + key + "\"");
    return j[key];
  }
  std::string string(const json& j, const std::string& field) const {
    if (!j.is_string()) fail(field, "expected a string, found " + json_excerpt(j));
    return j.get<std::string>();
  }
  bool boolean(const json& j, const std::string& field) const {
    if (!j.is_boolean()) fail(field, "expected true or false, found " + json_excerpt(j));
    return j.get<bool>();
  }
  int64_t integer(const json& j, const std::string& field, int64_t lo, int64_t hi) const {
    if (!j.is_number_integer() || j.get<int64_t>() < lo || j.get<int64_t>() > hi)
      fail(field, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found " +
                      json_excerpt(j));
    return j.get<int64_t>();
  }
  // The "type" of a pipeline part, which must be `expected`.
  void type(const json& j, const std::string& field, const char* expected, const char* what) const {
    const std::string t = string(at(object(j, field), field, "type"), field + ".type");
    if (t != expected)
      fail(field + ".type", json_excerpt(json(t), 40) + " is not supported (qkv implements " + what + ")");
  }
};

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_json(const std::string& text, const std::string& name_for_errors) {
  const Reader r{name_for_errors};
  const json root = [&] {
    try {
      return parse_json_strict(text, /*max_depth=*/16);
    } catch (const Error& e) {
      throw Error("'" + name_for_errors + "': " + e.what());
    }
  }();
  r.object(root, "the file");
  r.only_keys(root, "the file", {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                                 "model", "post_processor", "decoder"});
  WordPieceTokenizer t;

  // model: the vocabulary. Ids must be 0 .. n-1, each once.
  const json& model = r.at(root, "the file", "model");
  r.type(model, "model", "WordPiece", "\"WordPiece\", BERT's model");
  r.only_keys(model, "model", {"type", "vocab", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word"});
  const json& vocab = r.object(r.at(model, "model", "vocab"), "model.vocab");
  const int64_t n = static_cast<int64_t>(vocab.size());
  t.tokens_.assign(static_cast<size_t>(n), std::string());
  std::vector<bool> seen(static_cast<size_t>(n), false);
  // An id past n - 1 means some id below is missing (a token deleted by
  // hand): that gap is the error to name, not the id past it.
  auto missing_id = [&] {
    std::vector<bool> given(static_cast<size_t>(n), false);
    for (const auto& [token, id_json] : vocab.items())
      if (id_json.is_number_integer() && id_json.get<int64_t>() >= 0 && id_json.get<int64_t>() < n)
        given[static_cast<size_t>(id_json.get<int64_t>())] = true;
    return std::find(given.begin(), given.end(), false) - given.begin();
  };
  for (const auto& [token, id_json] : vocab.items()) {
    const std::string field = "model.vocab[" + json_excerpt(json(token), 40) + "]";
    const int64_t id = r.integer(id_json, field, 0, std::numeric_limits<int32_t>::max());
    if (id >= n)
      r.fail("model.vocab", "ids must be 0 to " + std::to_string(n - 1) + " for its " + std::to_string(n) +
                                " tokens, each once, but no token has id " + std::to_string(missing_id()) +
                                " and " + json_excerpt(json(token), 40) + " has " + std::to_string(id));
    if (seen[static_cast<size_t>(id)])
      r.fail(field, "id " + std::to_string(id) + " is given to two tokens (ids must be 0 to " +
                        std::to_string(n - 1) + ", each once)");
    seen[static_cast<size_t>(id)] = true;
    t.tokens_[static_cast<size_t>(id)] = token;
    t.ids_[token] = static_cast<int32_t>(id);
  }
  const std::string unk = r.string(r.at(model, "model", "unk_token"), "model.unk_token");
  t.unk_id_ = t.token_id(unk);
  if (t.unk_id_ < 0) r.fail("model.unk_token", json_excerpt(json(unk), 40) + " is not in model.vocab");
  if (model.contains("continuing_subword_prefix"))
    t.subword_prefix_ = r.string(model["continuing_subword_prefix"], "model.continuing_subword_prefix");
  if (model.contains("max_input_chars_per_word"))
    t.max_input_chars_per_word_ =
        r.integer(model["max_input_chars_per_word"], "model.max_input_chars_per_word", 1, INT64_MAX);

  // added_tokens: kept whole in the raw text. Those beyond the vocabulary
  // extend it, in id order.
  if (root.contains("added_tokens")) {
    const json& added = root["added_tokens"];
    if (!added.is_array()) r.fail("added_tokens", std::string("expected a list, found a JSON ") + added.type_name());
    std::vector<size_t> order(added.size());
    std::iota(order.begin(), order.end(), size_t{0});
    for (size_t i = 0; i < added.size(); ++i) r.object(added[i], "added_tokens[" + std::to_string(i) + "]");
    const auto id_of = [&](size_t i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "].id";
      return r.integer(r.at(added[i], field, "id"), field, 0, INT32_MAX - 1);
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return id_of(a) < id_of(b); });
    for (size_t i : order) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& a = added[i];
      r.only_keys(a, field, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
      const std::string content = r.string(r.at(a, field, "content"), field + ".content");
      if (content.empty()) r.fail(field + ".content", "an added token cannot be empty");
      // Each switch changes where the token is found; qkv matches the raw
      // text exactly, as BERT's special tokens are written.
      for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"})
        if (a.contains(flag) && r.boolean(a[flag], field + "." + flag))
          r.fail(field + "." + flag, "true is not supported (qkv matches added tokens exactly in the raw text)");
      const int64_t id = id_of(i);
      if (id < static_cast<int64_t>(t.tokens_.size())) {
        if (t.tokens_[static_cast<size_t>(id)] != content)
          r.fail(field, json_excerpt(json(content), 40) + " has id " + std::to_string(id) + ", which model.vocab gives to " +
                            json_excerpt(json(t.tokens_[static_cast<size_t>(id)]), 40));
      } else if (id == static_cast<int64_t>(t.tokens_.size())) {
        t.ids_[content] = static_cast<int32_t>(id);
        t.tokens_.push_back(content);
      } else {
        r.fail(field + ".id", std::to_string(id) + " leaves a gap after the last id, " +
                                  std::to_string(t.tokens_.size() - 1));
      }
      std::u32string chars;
      utf8::for_each_code_point(content, [&](char32_t c) { chars += c; });
      t.added_.push_back(std::move(chars));
      t.added_ids_.push_back(static_cast<int32_t>(id));
    }
  }

  // normalizer: BertNormalizer, or none at all.
  const json& norm = r.at(root, "the file", "normalizer");
  if (norm.is_null()) {
    t.normalizer_ = {false, false, false, false};
  } else {
    r.type(norm, "normalizer", "BertNormalizer", "\"BertNormalizer\"");
    r.only_keys(norm, "normalizer", {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase"});
    const auto flag = [&](const char* key, bool fallback) {
      return norm.contains(key) ? r.boolean(norm[key], std::string("normalizer.") + key) : fallback;
    };
    t.normalizer_.clean_text = flag("clean_text", true);
    t.normalizer_.handle_chinese_chars = flag("handle_chinese_chars", true);
    t.normalizer_.lowercase = flag("lowercase", true);
    // null: strip accents exactly when lowercasing, as BERT's uncased models do.
    const bool follow = !norm.contains("strip_accents") || norm["strip_accents"].is_null();
    t.normalizer_.strip_accents = follow ? t.normalizer_.lowercase : flag("strip_accents", false);
  }

  const json& pre = r.at(root, "the file", "pre_tokenizer");
  if (pre.is_null()) r.fail("pre_tokenizer", "null is not supported (qkv implements \"BertPreTokenizer\")");
  r.type(pre, "pre_tokenizer", "BertPreTokenizer", "\"BertPreTokenizer\"");
  r.only_keys(pre, "pre_tokenizer", {"type"});

  // post_processor: the ids around the word pieces.
  const json& post = r.at(root, "the file", "post_processor");
  if (!post.is_null()) {
    const std::string kind = r.string(r.at(r.object(post, "post_processor"), "post_processor", "type"),
                                      "post_processor.type");
    const auto id_of_token = [&](const json& j, const std::string& field) {
      // ["[CLS]", 101]: the token and its id, which must agree with the vocabulary.
      if (!j.is_array() || j.size() != 2 || !j[0].is_string())
        r.fail(field, "expected [token, id], found " + json_excerpt(j));
      const int64_t id = r.integer(j[1], field + "[1]", 0, t.vocab_size() - 1);
      if (t.tokens_[static_cast<size_t>(id)] != j[0].get<std::string>())
        r.fail(field, "id " + std::to_string(id) + " is " + json_excerpt(json(t.tokens_[static_cast<size_t>(id)]), 40) +
                          " in the vocabulary, not " + json_excerpt(j[0], 40));
      return static_cast<int32_t>(id);
    };
    if (kind == "BertProcessing") {
      r.only_keys(post, "post_processor", {"type", "sep", "cls"});
      t.prefix_ids_ = {id_of_token(r.at(post, "post_processor", "cls"), "post_processor.cls")};
      t.suffix_ids_ = {id_of_token(r.at(post, "post_processor", "sep"), "post_processor.sep")};
    } else if (kind == "TemplateProcessing") {
      r.only_keys(post, "post_processor", {"type", "single", "pair", "special_tokens"});
      TemplateIds ids = read_template_processing(post, "'" + r.name + "': ", "post_processor", t.vocab_size(),
                                                 [](int64_t) { return true; });
      t.prefix_ids_ = std::move(ids.prefix);
      t.suffix_ids_ = std::move(ids.suffix);
    } else {
      r.fail("post_processor.type", json_excerpt(json(kind), 40) +
                                        " is not supported (qkv implements \"TemplateProcessing\", \"BertProcessing\")");
    }
  }

  // padding and truncation: settings for batches, not the ids of one text.
  t.pad_id_ = t.token_id("[PAD]");
  if (root.contains("padding") && !root["padding"].is_null()) {
    const json& pad = r.object(root["padding"], "padding");
    if (pad.contains("pad_id")) t.pad_id_ = static_cast<int32_t>(r.integer(pad["pad_id"], "padding.pad_id", 0, t.vocab_size() - 1));
  }
  if (root.contains("truncation") && !root["truncation"].is_null()) {
    const json& trunc = r.object(root["truncation"], "truncation");
    t.truncation_max_length_ = r.integer(r.at(trunc, "truncation", "max_length"), "truncation.max_length", 1, INT64_MAX);
  }
  return t;
}

}  // namespace qkv
