/// @file
/// qkv/tokenizer.h: a character-level tokenizer over Unicode code points.
///
/// The vocabulary is the distinct code points of the training text in
/// code-point order, exactly as nanoGPT's `sorted(list(set(text)))`, so tiny
/// Shakespeare gives nanoGPT's 65 ids in the same order ("\n" = 0, " " = 1,
/// "!" = 2, ..., "z" = 64). One more id, the last (vocab_size() - 1), stands
/// for every character the training text never had: encode() maps unseen
/// characters to it and decode() renders it as U+FFFD (the replacement
/// character). Keeping it at the end leaves the first ids equal to nanoGPT's.
///
/// Text is UTF-8. Invalid UTF-8 (overlong forms, surrogates, code points
/// above U+10FFFF, stray continuation bytes, truncated sequences) is a
/// qkv::Error naming the byte offset and line, never silently replaced.
///
/// A vocabulary imported from nanoGPT (qkv import) has no such id: its ids are
/// exactly the text's characters, unknown_id() is -1 and encode() refuses a
/// character outside them.
///
/// Saved form (to_json): {"type": "char", "chars": ["\n", " ", ...], "unknown": "\uFFFD"}, with
/// "unknown": null for a vocabulary without the fallback id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/export.h"

namespace qkv {

/// nanoGPT's character-level tokenizer: one id per distinct code point of a
/// text, in code-point order, and an optional fallback id for the rest.
class QKV_API CharTokenizer {
 public:
  /// The vocabulary of `utf8`. Throws qkv::Error on invalid UTF-8 and on
  /// empty text ("no characters").
  /// With unknown_token false, no fallback id: nanoGPT's vocabulary exactly.
  static CharTokenizer from_text(const std::string& utf8, bool unknown_token = true);

  /// One id per code point; unseen characters become unknown_id(), or, with
  /// no fallback id, are a qkv::Error naming the first.
  std::vector<int32_t> encode(const std::string& utf8) const;
  /// UTF-8 text; unknown_id() becomes U+FFFD. An id outside
  /// [0, vocab_size()) is a qkv::Error naming its position.
  std::string decode(const std::vector<int32_t>& ids) const;

  /// Distinct characters of the training text, plus one for unknown_id() if it has one.
  int32_t vocab_size() const { return static_cast<int32_t>(chars_.size()) + (unknown_ ? 1 : 0); }
  bool has_unknown() const { return unknown_; }  ///< whether it has a fallback id
  /// The fallback id: the last one; -1 when there is none.
  int32_t unknown_id() const { return unknown_ ? static_cast<int32_t>(chars_.size()) : -1; }

  /// The saved form as one line of JSON ending in "\n", plain ASCII: every
  /// other character as a `\uXXXX` escape (controls as `\n` etc.).
  std::string to_json() const;
  /// Reads the saved form back, strictly: exactly the keys "type" ("char"),
  /// "chars" (one code point per string, strictly increasing, at least one)
  /// and "unknown" ("\uFFFD", or null: no fallback id), no duplicate keys. Errors start with
  /// 'name_for_errors': .
  static CharTokenizer from_json(const std::string& json, const std::string& name_for_errors);

 private:
  CharTokenizer(std::vector<char32_t> chars, bool unknown_token);

  std::vector<char32_t> chars_;       ///< sorted, distinct: id i is chars_[i]
  bool unknown_ = true;               ///< the fallback id exists (the last)
  std::vector<std::string> pieces_;   ///< UTF-8 of each id, unknown_id() included
  std::vector<int32_t> ascii_ids_;    ///< id of each code point < 128, or -1
};

}  // namespace qkv
