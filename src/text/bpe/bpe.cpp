// qkv::BpeTokenizer: the encode and decode pipelines of tokenizer.json.
#include "qkv/bpe.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <utf8proc.h>

#include "io/json_strict.h"
#include "text/bpe/bpe_impl.h"
#include "qkv/error.h"

namespace qkv {
namespace {

using bpe::AddedToken;
using bpe::DecodeStep;

// Words encode() remembers per call: English text has fewer distinct words
// than this in a few megabytes, and the map stays a few megabytes at most.
constexpr size_t kMaxCachedWords = 1 << 16;

// A stretch of the text: an added token's id, or text (id -1) still to go
// through the pipeline.
struct Segment {
  std::string_view text;
  int32_t id;
};

// Splits the text segments of `in` at the added tokens of `index`: at each
// place the longest token that starts there, the leftmost place first, as
// tokenizers' Aho-Corasick search does.
std::vector<Segment> split_added(const std::vector<Segment>& in, const std::vector<AddedToken>& added,
                                 const bpe::AddedIndex& index) {
  if (index.empty) return in;
  std::vector<Segment> out;
  for (const Segment& s : in) {
    if (s.id >= 0) {
      out.push_back(s);
      continue;
    }
    size_t from = 0;
    for (size_t p = 0; p < s.text.size();) {
      const AddedToken* hit = nullptr;
      for (const int32_t k : index.by_first_byte[static_cast<unsigned char>(s.text[p])]) {
        if (s.text.compare(p, added[k].match.size(), added[k].match) == 0) {
          hit = &added[k];
          break;
        }
      }
      if (!hit) {
        ++p;
        continue;
      }
      if (p > from) out.push_back({s.text.substr(from, p - from), -1});
      out.push_back({s.text.substr(p, hit->match.size()), hit->id});
      p += hit->match.size();
      from = p;
    }
    if (from < s.text.size()) out.push_back({s.text.substr(from), -1});
  }
  return out;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "bos_token"/"eos_token" of a transformers config: "<s>" or {"content": "<s>", ...}.
int32_t named_token(const nlohmann::json& config, const char* key, const BpeTokenizer::Impl& impl,
                    const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return -1;
  const nlohmann::json& v = it->is_object() && it->contains("content") ? (*it)["content"] : *it;
  if (!v.is_string()) throw Error(file + ": " + key + ": expected a string, found " + json_excerpt(*it));
  const std::string name = v.get<std::string>();
  for (const AddedToken& a : impl.added)
    if (a.content == name) return a.id;
  for (size_t id = 0; id < impl.tokens.size(); ++id)
    if (impl.assigned[id] && impl.tokens[id] == name) return static_cast<int32_t>(id);
  throw Error(file + ": " + key + ": " + json_excerpt(v) + " is not a token of tokenizer.json");
}

// Appends the pieces one pre-tokenizer step makes of `p` to `out`; text it
// makes goes into `owned` (a deque: the views stay valid). `at_start`: p
// begins the text (Metaspace's "first").
void pre_tokenize(const bpe::PreTokenizeStep& step, std::string_view p, bool at_start,
                  std::deque<std::string>& owned, std::vector<std::string_view>& out) {
  using Kind = bpe::PreTokenizeStep::Kind;
  using Prepend = bpe::PreTokenizeStep::Prepend;
  switch (step.kind) {
    case Kind::Split:
      bpe::split_pieces(p, step.rule, out);
      return;
    case Kind::Digits:
      bpe::split_digits(p, step.individual_digits, out);
      return;
    case Kind::ByteLevel:
      if (step.add_prefix_space && (p.empty() || p[0] != ' ')) {
        std::string& spaced = owned.emplace_back(1, ' ');
        spaced.append(p);
        p = spaced;
      }
      if (step.use_regex) bpe::split_pieces(p, bpe::SplitRule::Gpt2, out);
      else out.push_back(p);
      return;
    case Kind::Metaspace: {
      const std::string& rep = step.replacement;
      std::string& s = owned.emplace_back(p);
      bpe::replace_all(s, " ", rep);
      const bool prepend = step.prepend == Prepend::Always || (step.prepend == Prepend::First && at_start);
      if (prepend && s.compare(0, rep.size(), rep) != 0) s.insert(0, rep);
      const std::string_view v = s;
      if (!step.split) {
        out.push_back(v);
        return;
      }
      // Each replacement begins a piece ("▁a▁▁b" -> "▁a", "▁", "▁b").
      size_t start = 0;
      for (size_t k = v.find(rep, 1); k != std::string_view::npos; k = v.find(rep, k + rep.size())) {
        out.push_back(v.substr(start, k - start));
        start = k;
      }
      out.push_back(v.substr(start));
      return;
    }
  }
}

// Applies one decoder step to the tokens.
void decode_step(const DecodeStep& step, std::vector<std::string>& tokens) {
  using Kind = DecodeStep::Kind;
  switch (step.kind) {
    case Kind::ByteLevel: {
      // Each token's characters back to the bytes they stand for, then the
      // whole byte string as UTF-8, repaired.
      std::string bytes;
      for (const std::string& t : tokens) bytes += bpe::byte_level_bytes(t);
      std::string text;
      bpe::append_utf8_lossy(bytes, text);
      tokens.assign(1, text);
      break;
    }
    case Kind::ByteFallback: {
      // Runs of <0xNN> tokens become their bytes when those are UTF-8, and
      // one U+FFFD per byte when not.
      std::vector<std::string> out;
      std::string run;
      size_t run_tokens = 0;
      const auto flush = [&] {
        if (run_tokens == 0) return;
        std::string fixed;
        bpe::append_utf8_lossy(run, fixed);
        if (fixed == run) {
          out.push_back(run);
        } else {
          for (size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
        }
        run.clear();
        run_tokens = 0;
      };
      for (std::string& t : tokens) {
        const int byte = bpe::fallback_byte(t);
        if (byte >= 0) {
          run += static_cast<char>(byte);
          ++run_tokens;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      tokens = std::move(out);
      break;
    }
    case Kind::Metaspace:
      // The replacement is a space again, except in the first token, where
      // it is what the pre-tokenizer put in front and is dropped.
      for (size_t i = 0; i < tokens.size(); ++i)
        bpe::replace_all(tokens[i], step.from, i == 0 && step.prepend ? "" : step.to);
      break;
    case Kind::Fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, all);
      break;
    }
    case Kind::Replace:
      for (std::string& t : tokens) bpe::replace_all(t, step.from, step.to);
      break;
    case Kind::Strip:
      // Up to `start` copies of the character from each token's front, up
      // to `stop` from its back.
      for (std::string& t : tokens) {
        const size_t w = step.strip.size();
        for (int k = 0; k < step.start && t.compare(0, w, step.strip) == 0; ++k) t.erase(0, w);
        for (int k = 0; k < step.stop && t.size() >= w && t.compare(t.size() - w, w, step.strip) == 0; ++k)
          t.resize(t.size() - w);
      }
      break;
  }
}

// `text` (valid UTF-8) composed canonically: NFC, as tokenizers' NFC normalizer.
std::string nfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw Error(std::string("tokenizer: NFC normalization failed: ") + utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

std::string bpe::normalize(const std::vector<NormalizeStep>& steps, std::string text) {
  for (const NormalizeStep& s : steps) {
    if (s.nfc) text = nfc(text);
    else if (!s.prepend) bpe::replace_all(text, s.from, s.to);
    else if (!text.empty()) text.insert(0, s.to);  // tokenizers' Prepend leaves "" alone
  }
  return text;
}

BpeTokenizer::BpeTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

BpeTokenizer BpeTokenizer::from_json(const std::string& json, const std::string& name_for_errors) {
  auto impl = std::make_shared<Impl>();
  bpe::read_tokenizer_json(json, name_for_errors, *impl);
  return BpeTokenizer(std::move(impl));
}

BpeTokenizer BpeTokenizer::from_folder(const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::filesystem::path main = root / "tokenizer.json";
  auto impl = std::make_shared<Impl>();
  std::error_code ec;
  if (!std::filesystem::exists(main, ec) && std::filesystem::exists(root / "vocab.json", ec) &&
      std::filesystem::exists(root / "merges.txt", ec))
    bpe::read_tokenizer_json(bpe::gpt2_files_json(dir), (root / "vocab.json").string() + " and merges.txt", *impl);
  else
    bpe::read_tokenizer_json(read_text_file(main), main.string(), *impl);
  // Each name from the first file that gives it.
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::filesystem::path path = root / name;
    if (!std::filesystem::exists(path)) continue;
    nlohmann::json config;
    try {
      config = parse_json_strict(read_text_file(path), 64);
    } catch (const Error& e) {
      throw Error(path.string() + ": " + e.what());
    }
    if (!config.is_object()) throw Error(path.string() + ": expected a JSON object");
    if (impl->bos < 0) impl->bos = named_token(config, "bos_token", *impl, path.string());
    if (impl->eos < 0) impl->eos = named_token(config, "eos_token", *impl, path.string());
  }
  return BpeTokenizer(std::move(impl));
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& utf8) const {
  bpe::check_utf8(utf8);
  const Impl& t = *impl_;
  std::vector<int32_t> ids;
  bpe::MergeScratch scratch;
  std::deque<std::string> owned;  // normalized text and pieces; a deque keeps views valid
  std::vector<std::string_view> pieces, next;
  // Words already encoded -> where their ids are in `ids`; the views point
  // into `utf8` or `owned`, which outlive the map.
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;
  for (const Segment& raw : split_added({{utf8, -1}}, t.added, t.added_raw)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    // The normalizer, then the added tokens that are matched on its output.
    std::string_view text = raw.text;
    if (!t.normalizer.empty()) text = owned.emplace_back(bpe::normalize(t.normalizer, std::string(text)));
    for (const Segment& seg : split_added({{text, -1}}, t.added, t.added_normalized)) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      // Metaspace's "first": this stretch begins the text.
      const bool at_start = raw.text.data() == utf8.data() && seg.text.data() == text.data();
      pieces.assign(1, seg.text);
      for (const bpe::PreTokenizeStep& step : t.pre_tokenizer) {
        next.clear();
        for (const std::string_view p : pieces) pre_tokenize(step, p, at_start, owned, next);
        pieces.swap(next);
      }
      for (const std::string_view p : pieces) {
        // A word seen before in this text copies its ids from there.
        if (const auto hit = seen.find(p); hit != seen.end()) {
          ids.insert(ids.end(), ids.begin() + hit->second.first, ids.begin() + hit->second.second);
          continue;
        }
        const size_t from = ids.size();
        t.model.encode_word(p, scratch, ids);
        if (seen.size() < kMaxCachedWords) seen.emplace(p, std::make_pair(from, ids.size()));
      }
    }
  }
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode_with_specials(const std::string& utf8, int64_t max_length,
                                                       bool* truncated) const {
  const Impl& t = *impl_;
  const auto specials = static_cast<int64_t>(t.prefix.size() + t.suffix.size());
  if (max_length > 0 && max_length <= specials)
    throw Error("max_length " + std::to_string(max_length) + " leaves no room for text: the tokenizer adds " +
                std::to_string(specials) + " special token" + (specials == 1 ? "" : "s"));
  std::vector<int32_t> text = encode(utf8);
  const bool cut = max_length > 0 && static_cast<int64_t>(text.size()) > max_length - specials;
  if (cut) text.resize(static_cast<size_t>(max_length - specials));
  if (truncated) *truncated = cut;
  std::vector<int32_t> ids;
  ids.reserve(text.size() + static_cast<size_t>(specials));
  ids.insert(ids.end(), t.prefix.begin(), t.prefix.end());
  ids.insert(ids.end(), text.begin(), text.end());
  ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || !t.assigned[id])
      throw Error("ids[" + std::to_string(i) + "] = " + std::to_string(id) + " names no token (vocab_size " +
                  std::to_string(vocab_size()) + ")");
    if (skip_special && t.special[id]) continue;
    tokens.push_back(t.tokens[id]);
  }
  std::string text;
  if (!t.has_decoder) {
    // No decoder: tokenizers joins the tokens with spaces.
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const DecodeStep& step : t.decoder) decode_step(step, tokens);
  for (const std::string& s : tokens) text += s;
  return text;
}

std::string BpeTokenizer::token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !impl_->assigned[id])
    throw Error("token id " + std::to_string(id) + " names no token (vocab_size " + std::to_string(vocab_size()) + ")");
  return impl_->tokens[id];
}

bool BpeTokenizer::has_token(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->assigned[static_cast<size_t>(id)];
}

int32_t BpeTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }
int32_t BpeTokenizer::bos_id() const { return impl_->bos; }
int32_t BpeTokenizer::eos_id() const { return impl_->eos; }

}  // namespace qkv
