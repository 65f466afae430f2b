// Reading tokenizer.json into BpeTokenizer::Impl. Every field that would
// change the ids or the text and is not implemented is refused by name.
#include <algorithm>

#include "io/json_strict.h"
#include "text/bpe/bpe_impl.h"
#include "text/template_processing.h"
#include "qkv/error.h"

namespace qkv::bpe {
namespace {

using nlohmann::json;

struct Reader {
  std::string name;  // of the file, for messages

  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    throw Error(name + ": " + path + ": " + why);
  }
  const json& get(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object()) fail(path, "expected an object, found " + json_excerpt(obj));
    const auto it = obj.find(key);
    if (it == obj.end()) fail(path, std::string("has no \"") + key + "\"");
    return *it;
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    const json& v = get(obj, path, key);
    if (!v.is_string()) fail(path + "." + key, "expected a string, found " + json_excerpt(v));
    return v.get<std::string>();
  }
  // A boolean that may be absent (then `fallback`).
  bool flag(const json& obj, const std::string& path, const char* key, bool fallback) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(path + "." + key, "expected true or false, found " + json_excerpt(*it));
    return it->get<bool>();
  }
  // The items of a Sequence, or the object itself as a sequence of one.
  std::vector<std::pair<const json*, std::string>> steps(const json& obj, const std::string& path,
                                                          const char* list_key) const {
    std::vector<std::pair<const json*, std::string>> out;
    if (string(obj, path, "type") != "Sequence") {
      out.emplace_back(&obj, path);
      return out;
    }
    const json& list = get(obj, path, list_key);
    if (!list.is_array()) fail(path + "." + list_key, "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string p = path + "." + list_key + "[" + std::to_string(i) + "]";
      if (string(list[i], p, "type") == "Sequence") fail(p, "a Sequence inside a Sequence is not supported");
      out.emplace_back(&list[i], p);
    }
    return out;
  }
  [[noreturn]] void unsupported_type(const json& obj, const std::string& path) const {
    fail(path + ".type", json_excerpt(obj["type"]) + " is not supported");
  }
  // A Replace's pattern: {"String": "..."}; a regex is not supported.
  std::string string_pattern(const json& obj, const std::string& path) const {
    const json& pattern = get(obj, path, "pattern");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      fail(path + ".pattern", "only {\"String\": ...} is supported, found " + json_excerpt(pattern));
    return pattern["String"].get<std::string>();
  }
};

void read_normalizer(const Reader& r, const json& n, std::vector<NormalizeStep>& out) {
  if (n.is_null()) return;
  for (const auto& [step, path] : r.steps(n, "normalizer", "normalizers")) {
    const std::string type = r.string(*step, path, "type");
    if (type == "Prepend") {
      out.push_back({true, "", r.string(*step, path, "prepend")});
    } else if (type == "Replace") {
      const std::string from = r.string_pattern(*step, path);
      if (from.empty()) r.fail(path + ".pattern", "an empty pattern is not supported");
      out.push_back({false, from, r.string(*step, path, "content")});
    } else if (type == "NFC") {
      NormalizeStep nfc;
      nfc.nfc = true;
      out.push_back(nfc);
    } else {
      r.unsupported_type(*step, path);
    }
  }
}

// Metaspace's fields, as a pre-tokenizer and as a decoder: "replacement",
// and "prepend_scheme", or in older files "add_prefix_space" (true: always).
void read_metaspace(const Reader& r, const json& m, const std::string& path, std::string& replacement,
                    PreTokenizeStep::Prepend& prepend) {
  using Prepend = PreTokenizeStep::Prepend;
  replacement = r.string(m, path, "replacement");
  if (replacement.empty()) r.fail(path + ".replacement", "an empty replacement is not supported");
  if (m.contains("prepend_scheme")) {
    const std::string scheme = r.string(m, path, "prepend_scheme");
    if (scheme == "always") prepend = Prepend::Always;
    else if (scheme == "first") prepend = Prepend::First;
    else if (scheme == "never") prepend = Prepend::Never;
    else r.fail(path + ".prepend_scheme", "\"" + scheme + "\" is not one of always, first, never");
  } else {
    prepend = r.flag(m, path, "add_prefix_space", true) ? Prepend::Always : Prepend::Never;
  }
}

void read_pre_tokenizer(const Reader& r, const json& p, std::vector<PreTokenizeStep>& out) {
  using Kind = PreTokenizeStep::Kind;
  if (p.is_null()) return;
  const auto steps = r.steps(p, "pre_tokenizer", "pretokenizers");
  for (const auto& [step, path] : steps) {
    if (!out.empty() && out.back().kind == Kind::ByteLevel)
      r.fail(path, "nothing may follow a ByteLevel pre-tokenizer");
    const std::string type = r.string(*step, path, "type");
    PreTokenizeStep s;
    if (type == "Metaspace") {
      // Its "first" needs to know where a piece sat in the text: only
      // alone is that the stretch between added tokens.
      if (steps.size() > 1) r.fail(path, "Metaspace is supported only as the whole pre-tokenizer");
      s.kind = Kind::Metaspace;
      read_metaspace(r, *step, path, s.replacement, s.prepend);
      s.split = r.flag(*step, path, "split", true);
    } else if (type == "ByteLevel") {
      s.kind = Kind::ByteLevel;
      const json& prefix = r.get(*step, path, "add_prefix_space");
      if (!prefix.is_boolean()) r.fail(path + ".add_prefix_space", "expected true or false");
      s.add_prefix_space = prefix.get<bool>();
      s.use_regex = r.flag(*step, path, "use_regex", true);
    } else if (type == "Digits") {
      s.kind = Kind::Digits;
      s.individual_digits = r.flag(*step, path, "individual_digits", false);
    } else if (type == "Split") {
      s.kind = Kind::Split;
      const json& pattern = r.get(*step, path, "pattern");
      const auto it = pattern.is_object() ? pattern.find("Regex") : pattern.end();
      if (!pattern.is_object() || it == pattern.end() || !it->is_string())
        r.fail(path + ".pattern", "only {\"Regex\": ...} is supported, found " + json_excerpt(pattern));
      const std::string regex = it->get<std::string>();
      const auto rule = std::find_if(std::begin(kSplitRules), std::end(kSplitRules),
                                     [&](SplitRule k) { return regex == split_pattern(k); });
      if (rule == std::end(kSplitRules))
        r.fail(path + ".pattern.Regex",
               json_excerpt(*it) + " is not one of the patterns implemented (GPT-2's, Llama 3's, Qwen2's)");
      s.rule = *rule;
      if (const std::string b = r.string(*step, path, "behavior"); b != "Isolated")
        r.fail(path + ".behavior", "\"" + b + "\" is not supported (only \"Isolated\")");
      if (r.flag(*step, path, "invert", false)) r.fail(path + ".invert", "true is not supported");
    } else {
      r.unsupported_type(*step, path);
    }
    out.push_back(s);
  }
}

void read_decoder(const Reader& r, const json& d, std::vector<DecodeStep>& out) {
  using Kind = DecodeStep::Kind;
  for (const auto& [step, path] : r.steps(d, "decoder", "decoders")) {
    const std::string type = r.string(*step, path, "type");
    DecodeStep s;
    if (type == "ByteLevel") {
      s.kind = Kind::ByteLevel;
    } else if (type == "Metaspace") {
      s.kind = Kind::Metaspace;
      PreTokenizeStep::Prepend prepend;
      read_metaspace(r, *step, path, s.from, prepend);
      s.to.assign(1, ' ');  // (not = " ": GCC 12 warns falsely of overlap)
      s.prepend = prepend != PreTokenizeStep::Prepend::Never;
    } else if (type == "ByteFallback") {
      s.kind = Kind::ByteFallback;
    } else if (type == "Fuse") {
      s.kind = Kind::Fuse;
    } else if (type == "Replace") {
      s.kind = Kind::Replace;
      s.from = r.string_pattern(*step, path);
      if (s.from.empty()) r.fail(path + ".pattern", "an empty pattern is not supported");
      s.to = r.string(*step, path, "content");
    } else if (type == "Strip") {
      s.kind = Kind::Strip;
      s.strip = r.string(*step, path, "content");
      const json& start = r.get(*step, path, "start");
      const json& stop = r.get(*step, path, "stop");
      if (!start.is_number_unsigned() || !stop.is_number_unsigned())
        r.fail(path, "start and stop must be counts");
      s.start = start.get<int>();
      s.stop = stop.get<int>();
    } else {
      r.unsupported_type(*step, path);
    }
    out.push_back(s);
  }
}

// tokenizer.json's "model", checked, as a VocabSource (its added tokens not yet).
VocabSource model_source(const Reader& r, const json& m) {
  const std::string path = "model";
  if (const auto t = m.find("type"); t != m.end() && *t != "BPE") r.unsupported_type(m, path);
  if (const auto d = m.find("dropout"); d != m.end() && !d->is_null())
    r.fail("model.dropout", json_excerpt(*d) + " is not supported (only null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = m.find(key);
    if (it != m.end() && !it->is_null() && *it != "")
      r.fail(path + "." + key, json_excerpt(*it) + " is not supported (only null)");
  }
  VocabSource src;
  src.fuse_unk = r.flag(m, path, "fuse_unk", false);
  src.byte_fallback = r.flag(m, path, "byte_fallback", false);
  src.ignore_merges = r.flag(m, path, "ignore_merges", false);
  const json& vocab = r.get(m, path, "vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "expected an object of token: id");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1u << 31) - 1)
      r.fail("model.vocab[" + json_excerpt(json(token)) + "]", "expected an id >= 0, found " + json_excerpt(id));
    src.vocab.emplace_back(token, id.get<int32_t>());
  }
  if (const auto u = m.find("unk_token"); u != m.end() && !u->is_null()) {
    if (!u->is_string()) r.fail("model.unk_token", "expected a string or null");
    src.unk = u->get<std::string>();
  }
  const json& merges = r.get(m, path, "merges");
  if (!merges.is_array()) r.fail("model.merges", "expected an array");
  src.merges.resize(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    auto& [left, right] = src.merges[i];
    if (e.is_string()) {
      if (!split_merge(e.get<std::string>(), left, right))
        r.fail("model.merges[" + std::to_string(i) + "]", json_excerpt(e) + " is not two tokens separated by one space");
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      r.fail("model.merges[" + std::to_string(i) + "]", "expected \"left right\" or [left, right], found " + json_excerpt(e));
    }
  }
  return src;
}

// The model's tables; returns the vocabulary as the file spells it.
Vocab read_model(const Reader& r, VocabSource src, bool byte_level, BpeTokenizer::Impl& impl) {
  BpeModel& model = impl.model;
  model.byte_level = byte_level;
  model.fuse_unk = src.fuse_unk;
  model.byte_fallback = src.byte_fallback;
  model.ignore_merges = src.ignore_merges;
  if (byte_level && model.byte_fallback)
    r.fail("model.byte_fallback", "true is not supported with a ByteLevel pre-tokenizer");
  // The ids are 0..N-1, each once (checked below), as every trained
  // vocabulary has them; so a hostile id cannot make the tables huge.
  const auto size = static_cast<int32_t>(src.vocab.size());
  for (const auto& [token, id] : src.vocab)
    if (id < 0 || id >= size)
      r.fail("model.vocab", json_excerpt(json(token)) + " has id " + std::to_string(id) + "; the " +
                                std::to_string(size) + " ids must be 0.." + std::to_string(size - 1));
  impl.tokens.assign(static_cast<size_t>(size), "");
  impl.assigned.assign(static_cast<size_t>(size), 0);
  Vocab by_name;  // as the file spells the tokens
  by_name.reserve(src.vocab.size());
  model.vocab.reserve(src.vocab.size());
  std::string key;
  for (auto& [token, id] : src.vocab) {
    if (impl.assigned[id]) r.fail("model.vocab", "id " + std::to_string(id) + " is given to two tokens");
    if (!by_name.emplace(token, id).second) r.fail("model.vocab", json_excerpt(json(token)) + " is given two ids");
    impl.assigned[id] = 1;
    if (!byte_level) key = token;
    else if (!byte_level_to_bytes(token, key)) key.clear();  // a token byte-level BPE never gives
    if (!byte_level || !key.empty()) model.vocab.emplace(key, id);
    impl.tokens[id] = std::move(token);
  }
  const auto id_of = [&](const std::string& token, const char* where, size_t i) {
    const auto it = by_name.find(token);
    if (it == by_name.end())
      r.fail(std::string(where) + (i == SIZE_MAX ? "" : "[" + std::to_string(i) + "]"),
             json_excerpt(json(token)) + " is not in model.vocab");
    return it->second;
  };
  model.byte_ids.fill(-1);
  model.fallback_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (byte_level) {
      if (const auto it = model.vocab.find(std::string(1, static_cast<char>(b))); it != model.vocab.end())
        model.byte_ids[b] = it->second;
    }
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (const auto it = by_name.find(name); it != by_name.end()) model.fallback_ids[b] = it->second;
  }
  if (src.unk) model.unk = id_of(*src.unk, "model.unk_token", SIZE_MAX);
  model.merges.reserve(src.merges.size());
  for (size_t i = 0; i < src.merges.size(); ++i) {
    const auto& [left, right] = src.merges[i];
    const uint64_t pair = (static_cast<uint64_t>(id_of(left, "model.merges", i)) << 32) |
                          static_cast<uint32_t>(id_of(right, "model.merges", i));
    // A pair listed twice takes its last rank, as in tokenizers.
    model.merges.insert_or_assign(pair, std::make_pair(static_cast<int32_t>(i), id_of(left + right, "model.merges", i)));
  }
  return by_name;
}

// `vocab`: the model's, as the file spells it.
// tokenizer.json's "added_tokens", each checked, as AddedTokens.
std::vector<AddedToken> added_source(const Reader& r, const json& list) {
  if (!list.is_array()) r.fail("added_tokens", "expected an array");
  std::vector<AddedToken> out(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    AddedToken& a = out[i];
    a.content = r.string(t, path, "content");
    const json& id = r.get(t, path, "id");
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1u << 31) - 1)
      r.fail(path + ".id", "expected an id >= 0, found " + json_excerpt(id));
    a.id = id.get<int32_t>();
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (r.flag(t, path, key, false)) r.fail(path + "." + key, "true is not supported");
    a.normalized = r.flag(t, path, "normalized", true);
    a.special = r.flag(t, path, "special", false);
  }
  return out;
}

void read_added_tokens(const Reader& r, std::vector<AddedToken> list, const Vocab& vocab, BpeTokenizer::Impl& impl) {
  // tokenizers gives an added token its vocabulary id, else the next id
  // after the vocabulary and the added tokens before it, whatever the file
  // says; a file that says otherwise was not written by it and is refused.
  Vocab added;
  auto next_id = static_cast<int32_t>(vocab.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    AddedToken& a = list[i];
    if (a.content.empty()) r.fail(path + ".content", "an empty token is not supported");
    if (!added.emplace(a.content, a.id).second) r.fail(path + ".content", "\"" + a.content + "\" is added twice");
    const auto in_vocab = vocab.find(a.content);
    const int32_t expected = in_vocab != vocab.end() ? in_vocab->second : next_id++;
    if (a.id != expected)
      r.fail(path + ".id", std::to_string(a.id) + ", but tokenizers would give \"" + a.content + "\" id " +
                               std::to_string(expected) +
                               (in_vocab != vocab.end() ? " (its id in model.vocab)" : " (the next after the vocabulary)"));
    try {
      check_utf8(a.content);
    } catch (const Error& e) {
      r.fail(path + ".content", e.what());
    }
    const auto need = static_cast<size_t>(a.id) + 1;
    if (impl.tokens.size() < need) {
      impl.tokens.resize(need);
      impl.assigned.resize(need, 0);
    }
    impl.tokens[a.id] = a.content;
    impl.assigned[a.id] = 1;
    impl.added.push_back(std::move(a));
  }
  impl.special.assign(impl.tokens.size(), 0);
  for (size_t k = 0; k < impl.added.size(); ++k) {
    AddedToken& a = impl.added[k];
    impl.special[a.id] = a.special ? 1 : 0;
    a.match = a.normalized ? normalize(impl.normalizer, a.content) : a.content;
    if (a.match.empty()) continue;  // erased by the normalizer: skipped, or it would match everywhere
    AddedIndex& index = a.normalized ? impl.added_normalized : impl.added_raw;
    index.by_first_byte[static_cast<unsigned char>(a.match[0])].push_back(static_cast<int32_t>(k));
    index.empty = false;
  }
  for (AddedIndex* index : {&impl.added_raw, &impl.added_normalized})
    for (auto& bucket : index->by_first_byte)
      std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t x, int32_t y) {
        return impl.added[x].match.size() > impl.added[y].match.size();
      });
}

// post_processor: what tokenizers' encode(text) puts around the text's ids
// (add_special_tokens=True). ByteLevel (GPT-2's) changes only offsets;
// TemplateProcessing's single-sequence template puts special tokens before
// and after it (Llama's "<|begin_of_text|> $A", "<s> $A"); a Sequence holds
// those. Another processor would change the ids and is refused.
void read_post_processor(const Reader& r, const json& post, BpeTokenizer::Impl& impl) {
  if (post.is_null()) return;
  for (const auto& [step, path] : r.steps(post, "post_processor", "processors")) {
    const std::string type = r.string(*step, path, "type");
    if (type == "ByteLevel") continue;
    if (type != "TemplateProcessing") r.unsupported_type(*step, path);
    if (!impl.prefix.empty() || !impl.suffix.empty()) r.fail(path, "a second TemplateProcessing is not supported");
    TemplateIds ids = read_template_processing(
        *step, r.name + ": ", path, static_cast<int64_t>(impl.tokens.size()),
        [&](int64_t id) { return static_cast<bool>(impl.assigned[static_cast<size_t>(id)]); });
    impl.prefix = std::move(ids.prefix);
    impl.suffix = std::move(ids.suffix);
  }
}

}  // namespace

bool split_merge(const std::string& s, std::string& left, std::string& right) {
  const size_t space = s.find(' ');
  if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return false;
  left = s.substr(0, space);
  right = s.substr(space + 1);
  return true;
}

void read_tokenizer_json(const std::string& text, const std::string& name_for_errors, BpeTokenizer::Impl& impl) {
  const Reader r{name_for_errors};
  json j;
  try {
    j = parse_json_strict(text, 64);
  } catch (const Error& e) {
    throw Error(name_for_errors + ": " + e.what());
  }
  if (!j.is_object()) r.fail("the file", "expected a JSON object, found " + json_excerpt(j));
  VocabSource vocab = model_source(r, r.get(j, "the file", "model"));
  vocab.added = added_source(r, j.value("added_tokens", json::array()));
  read_tokenizer_json(j, std::move(vocab), name_for_errors, impl);
}

void read_tokenizer_json(const json& j, VocabSource source, const std::string& name_for_errors,
                         BpeTokenizer::Impl& impl) {
  const Reader r{name_for_errors};
  if (!j.is_object()) r.fail("the file", "expected a JSON object, found " + json_excerpt(j));
  for (const char* key : {"truncation", "padding"})
    if (const auto it = j.find(key); it != j.end() && !it->is_null())
      r.fail(key, json_excerpt(*it) + " is not supported (only null)");
  read_normalizer(r, j.value("normalizer", json()), impl.normalizer);
  read_pre_tokenizer(r, j.value("pre_tokenizer", json()), impl.pre_tokenizer);
  const bool byte_level =
      !impl.pre_tokenizer.empty() && impl.pre_tokenizer.back().kind == PreTokenizeStep::Kind::ByteLevel;
  std::vector<AddedToken> added = std::move(source.added);
  const Vocab vocab = read_model(r, std::move(source), byte_level, impl);
  read_added_tokens(r, std::move(added), vocab, impl);
  const json decoder = j.value("decoder", json());
  impl.has_decoder = !decoder.is_null();
  if (impl.has_decoder) read_decoder(r, decoder, impl.decoder);
  read_post_processor(r, j.value("post_processor", json()), impl);
}

}  // namespace qkv::bpe
