// The tables behind qkv::BpeTokenizer, one struct per stage of the
// tokenizer.json pipeline (added tokens, normalizer, pre-tokenizer, model,
// decoder), named as the file names them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "text/bpe/bpe_pretokenize.h"
#include "text/utf8.h"
#include "qkv/bpe.h"

namespace qkv::bpe {

// An entry of "added_tokens". `normalized` ones are looked for after the
// normalizer, in what the others left, as their content normalized;
// tokenizers does the same.
struct AddedToken {
  std::string content;
  std::string match;  // what is looked for: content, normalized if `normalized`
  int32_t id = 0;
  bool normalized = false;
  bool special = false;
};

// The added tokens looked for in one pass (by `match`), by its first byte,
// longest first: indices into BpeTokenizer::Impl::added.
struct AddedIndex {
  std::array<std::vector<int32_t>, 256> by_first_byte;
  bool empty = true;
};

// A normalizer step: Prepend(to) when `prepend`; NFC (compose the text
// canonically) when `nfc`; else Replace(from, to).
struct NormalizeStep {
  bool prepend = false;
  std::string from, to;
  bool nfc = false;
};

// `text` through the normalizer's steps.
std::string normalize(const std::vector<NormalizeStep>& steps, std::string text);

// A pre-tokenizer step: Split by a known pattern; ByteLevel (optionally a
// space in front of each piece, optionally GPT-2's split); or Metaspace
// (spaces become `replacement`, one put in front, pieces split before each).
struct PreTokenizeStep {
  enum class Kind { Split, ByteLevel, Metaspace, Digits } kind = Kind::Split;
  SplitRule rule = SplitRule::Gpt2;  // Split's pattern, or ByteLevel's when use_regex
  bool use_regex = true;             // ByteLevel
  bool add_prefix_space = false;     // ByteLevel
  std::string replacement;           // Metaspace: what stands for the space ("▁")
  // Metaspace: put `replacement` in front of every stretch of text, of the
  // text's first only (not of one after an added token), or never.
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;
  bool split = true;                 // Metaspace: a piece starts at each `replacement`
  bool individual_digits = false;    // Digits: a piece a digit, not a run of them
};

// A decoder step.
struct DecodeStep {
  enum class Kind { ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace } kind = Kind::Fuse;
  std::string from, to;       // Replace; Metaspace: `replacement` and " "
  bool prepend = false;       // Metaspace: the first token's replacements are dropped, not spaces
  std::string strip;          // Strip: the character removed
  int start = 0, stop = 0;    // Strip: how many from each end
};

// Looked up by std::string_view without making a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// What encode_word() reuses from one word to the next.
struct MergeScratch {
  struct Symbol {
    int32_t id, prev, next;  // prev/next: neighbours in the word, -1 at its ends
  };
  struct Candidate {
    int32_t rank, pos, left, right;  // the pair (left, right) starting at symbol pos
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// The BPE model. Its words are what the pre-tokenizer made: in byte-level
// mode raw bytes (one symbol per byte; vocabulary keys are stored as the
// bytes their characters stand for), otherwise UTF-8 text (one symbol per
// character).
struct BpeModel {
  Vocab vocab;
  // (left id << 32 | right id) -> (rank: place in "merges", merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  bool byte_level = false;
  std::array<int32_t, 256> byte_ids{};      // byte-level: the id of each byte, or -1
  std::array<int32_t, 256> fallback_ids{};  // byte_fallback: the id of <0xNN>, or -1
  int32_t unk = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, MergeScratch& scratch, std::vector<int32_t>& out) const;
};

// Reads tokenizer.json (its text) into `impl`; bpe_json.cpp.
void read_tokenizer_json(const std::string& json, const std::string& name_for_errors,
                         BpeTokenizer::Impl& impl);

// A BPE vocabulary as a file spells it: tokenizer.json's "model" and
// "added_tokens", or a GGUF file's tokenizer.ggml.tokens, token_type and
// merges. Read as given: checked where it is made into tables.
struct VocabSource {
  std::vector<std::pair<std::string, int32_t>> vocab;       // token, id
  std::vector<std::pair<std::string, std::string>> merges;  // left, right; by rank
  std::optional<std::string> unk;                           // unk_token
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::vector<AddedToken> added;  // content, id, normalized, special
};

// A merge as tokenizer.json's strings spell it, "left right" (one space),
// split; false when it is not that.
bool split_merge(const std::string& s, std::string& left, std::string& right);

// Reads a parsed tokenizer.json whose vocabulary is `source` (the object's
// own "model" and "added_tokens" are not read) into `impl`: how a GGUF
// file's tokenizer, tens of thousands of tokens and merges, is read without
// a round trip through JSON.
void read_tokenizer_json(const nlohmann::json& j, VocabSource source, const std::string& name_for_errors,
                         BpeTokenizer::Impl& impl);

// The tokenizer.json equivalent of a GPT-2 folder's older pair of files,
// vocab.json and merges.txt (no tokenizer.json), as transformers converts
// them: byte-level BPE with GPT-2's pre-tokenizer, and the special tokens
// the folder's config files name (bos, eos, unk; "<|endoftext|>" when none)
// added as special tokens; bpe_gpt2_files.cpp.
std::string gpt2_files_json(const std::string& dir);

// Throws qkv::Error naming the byte offset (and line) of the first invalid
// UTF-8 sequence in `text`: the tokenizers' one strict decoder (text/utf8.h).
inline void check_utf8(std::string_view text) { utf8::for_each_code_point(text, [](char32_t) {}); }

// Appends `bytes` to `out`, each maximal ill-formed subsequence replaced by
// one U+FFFD (Unicode's recommended practice; Rust's from_utf8_lossy).
void append_utf8_lossy(std::string_view bytes, std::string& out);

// GPT-2's map from bytes to printable characters ("Ġ" for the space): the
// character (UTF-8) that stands for each byte.
const std::array<std::string, 256>& byte_level_chars();

// The bytes a byte-level token's characters stand for ("Ġthe" -> " the") in
// `out`; false when some character stands for no byte (such a token never
// comes out of byte-level BPE).
bool byte_level_to_bytes(const std::string& token, std::string& out);

// The same, a token with a character that stands for no byte taken as it
// is (as the ByteLevel decoder takes it).
std::string byte_level_bytes(const std::string& token);

// Every `from` in `s` replaced by `to`, left to right, never in what was put in.
void replace_all(std::string& s, const std::string& from, const std::string& to);

// The byte a byte-fallback token ("<0xE2>") stands for; -1 for another token.
int fallback_byte(const std::string& token);

// How many bytes at the end of `bytes` are the start of a character that
// more bytes could still finish (a lead byte and the continuation bytes it
// allows so far: "\xE2\x82" -> 2); 0 when the text ends on a whole
// character or on bytes that no continuation can make UTF-8.
int unfinished_utf8_tail(std::string_view bytes);

}  // namespace qkv::bpe

namespace qkv {

struct BpeTokenizer::Impl {
  std::vector<std::string> tokens;  // id -> token as the file spells it
  std::vector<uint8_t> assigned;    // id -> 1 when some token has it
  std::vector<uint8_t> special;     // id -> 1 for a special added token
  std::vector<bpe::AddedToken> added;
  bpe::AddedIndex added_raw;         // normalized == false: looked for in the text as given
  bpe::AddedIndex added_normalized;  // normalized == true: looked for after the normalizer
  std::vector<bpe::NormalizeStep> normalizer;
  std::vector<bpe::PreTokenizeStep> pre_tokenizer;
  bpe::BpeModel model;
  std::vector<bpe::DecodeStep> decoder;
  bool has_decoder = false;  // none: tokens joined by spaces, as tokenizers does
  int32_t bos = -1, eos = -1;
  // The post_processor's special tokens before and after the text's ids.
  std::vector<int32_t> prefix, suffix;
};

}  // namespace qkv
