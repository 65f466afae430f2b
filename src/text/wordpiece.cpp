#include "qkv/wordpiece.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "io/json_strict.h"
#include "text/bert_text.h"
#include "text/utf8.h"
#include "io/files.h"
#include "qkv/error.h"

namespace qkv {
namespace {

std::u32string decode(const std::string& utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  utf8::for_each_code_point(utf8, [&](char32_t c) { out += c; });
  return out;
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) out += utf8::utf8_of(c);
  return out;
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_vocab_txt(const std::string& text, bool lowercase,
                                                      const std::string& name_for_errors) {
  WordPieceTokenizer t;
  // One token per line; a final newline ends the last token, "\r\n" counts
  // as one line end. A repeated token keeps its last id for lookups, as both
  // transformers and tokenizers read the file.
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string token = text.substr(start, end - start);
    if (!token.empty() && token.back() == '\r') token.pop_back();
    t.ids_[token] = static_cast<int32_t>(t.tokens_.size());
    t.tokens_.push_back(std::move(token));
    start = end + 1;
  }
  const auto need = [&](const char* token) {
    const int32_t id = t.token_id(token);
    if (id < 0) throw Error("'" + name_for_errors + "': no \"" + token + "\" token: a BERT vocabulary needs one");
    return id;
  };
  t.unk_id_ = need("[UNK]");
  t.prefix_ids_ = {need("[CLS]")};
  t.suffix_ids_ = {need("[SEP]")};
  t.pad_id_ = t.token_id("[PAD]");
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    if (t.token_id(special) < 0) continue;
    t.added_.push_back(decode(special));
    t.added_ids_.push_back(t.token_id(special));
  }
  t.normalizer_.lowercase = lowercase;
  t.normalizer_.strip_accents = lowercase;
  return t;
}

WordPieceTokenizer WordPieceTokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("'" + dir + "': not a directory (expected a model folder)");
  const std::string json_path = (fs::path(dir) / "tokenizer.json").string();
  if (fs::exists(json_path, ec)) return from_json(read_file(json_path), json_path);
  const std::string vocab_path = (fs::path(dir) / "vocab.txt").string();
  if (!fs::exists(vocab_path, ec))
    throw Error("'" + dir + "': no tokenizer: the folder has neither tokenizer.json nor vocab.txt");
  // BertTokenizer's own settings, when its tokenizer_config.json gives them.
  BertNormalizerOptions options;
  std::optional<bool> strip_accents;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(config_path, ec)) {
    const auto fail = [&](const std::string& why) { throw Error("'" + config_path + "': " + why); };
    nlohmann::json config;
    try {
      config = parse_json_strict(read_file(config_path), /*max_depth=*/16);
    } catch (const Error& e) {
      fail(e.what());
    }
    if (!config.is_object()) fail(std::string("expected a JSON object, found a JSON ") + config.type_name());
    const auto flag = [&](const char* key) -> std::optional<bool> {
      if (!config.contains(key) || config[key].is_null()) return std::nullopt;
      if (!config[key].is_boolean()) fail(std::string(key) + ": expected true or false, found " + json_excerpt(config[key]));
      return config[key].get<bool>();
    };
    options.lowercase = flag("do_lower_case").value_or(true);
    options.handle_chinese_chars = flag("tokenize_chinese_chars").value_or(true);
    strip_accents = flag("strip_accents");
  }
  WordPieceTokenizer t = from_vocab_txt(read_file(vocab_path), options.lowercase, vocab_path);
  t.normalizer_.handle_chinese_chars = options.handle_chinese_chars;
  t.normalizer_.strip_accents = strip_accents.value_or(options.lowercase);
  return t;
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab_size()) +
                ")");
  return tokens_[static_cast<size_t>(id)];
}

int32_t WordPieceTokenizer::token_id(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

void WordPieceTokenizer::word_pieces(const std::u32string& word, std::vector<int32_t>& ids) const {
  if (static_cast<int64_t>(word.size()) > max_input_chars_per_word_) {
    ids.push_back(unk_id_);
    return;
  }
  // Greedy: the longest vocabulary entry at `start`, then on from its end.
  // One piece that matches nothing makes the whole word the unknown token.
  const size_t first = ids.size();
  size_t start = 0;
  while (start < word.size()) {
    int32_t id = -1;
    size_t end = word.size();
    for (; end > start; --end) {
      const std::string piece = (start > 0 ? subword_prefix_ : std::string()) +
                                encode_utf8(word.substr(start, end - start));
      id = token_id(piece);
      if (id >= 0) break;
    }
    if (id < 0) {
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(id);
    start = end;
  }
}

void WordPieceTokenizer::encode_segment(const std::u32string& text, std::vector<int32_t>& ids) const {
  for (const std::u32string& word : bert::pre_tokenize(bert::normalize(text, normalizer_))) word_pieces(word, ids);
}

std::vector<int32_t> WordPieceTokenizer::encode(const std::string& utf8, int64_t max_length, bool* truncated) const {
  const int64_t specials = static_cast<int64_t>(prefix_ids_.size() + suffix_ids_.size());
  if (max_length < 0 || (max_length > 0 && max_length < specials))
    throw Error("max_length " + std::to_string(max_length) + " leaves no room for the " + std::to_string(specials) +
                " special tokens (it must be 0, no limit, or at least " + std::to_string(specials) + ")");
  const std::u32string text = decode(utf8);
  std::vector<int32_t> pieces;
  // Added tokens ("[MASK]", ...) are found in the raw text first, leftmost
  // and then longest, and kept whole; the text between them is tokenized.
  size_t done = 0;
  for (size_t i = 0; i < text.size();) {
    size_t best = added_.size();
    for (size_t k = 0; k < added_.size(); ++k)
      if (text.compare(i, added_[k].size(), added_[k]) == 0 &&
          (best == added_.size() || added_[k].size() > added_[best].size()))
        best = k;
    if (best == added_.size()) {
      ++i;
      continue;
    }
    encode_segment(text.substr(done, i - done), pieces);
    pieces.push_back(added_ids_[best]);
    i += added_[best].size();
    done = i;
  }
  encode_segment(text.substr(done), pieces);

  const bool cut = max_length > 0 && static_cast<int64_t>(pieces.size()) > max_length - specials;
  if (cut) pieces.resize(static_cast<size_t>(max_length - specials));
  if (truncated) *truncated = cut;
  std::vector<int32_t> ids(prefix_ids_);
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

}  // namespace qkv
