// qkv/wordpiece.h: BERT's WordPiece tokenizer, read from a Hugging Face
// tokenizer.json (or a bare vocab.txt), giving the ids the `tokenizers`
// library gives.
//
// The pipeline has the names tokenizer.json uses, in its order:
//   added tokens  "[CLS]", "[MASK]", ... in the raw text are kept whole
//   normalizer    BertNormalizer: drop control characters, whitespace to " ",
//                 spaces around CJK ideographs, strip accents (NFD, then drop
//                 nonspacing marks), lowercase
//   pre-tokenizer BertPreTokenizer: split on whitespace, each punctuation
//                 character its own word
//   model         WordPiece: greedy longest match from the start of each
//                 word, later pieces with the "##" prefix; a word with no
//                 match, or longer than max_input_chars_per_word characters,
//                 is one unknown token
//   post-processor [CLS] ... [SEP] (TemplateProcessing or BertProcessing)
// The Unicode properties (categories, decomposition, lowercase) come from
// utf8proc.
//
// Text is UTF-8; invalid UTF-8 is a qkv::Error naming the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "qkv/export.h"

namespace qkv {

/// BertNormalizer's switches (tokenizer.json's "normalizer").
struct BertNormalizerOptions {
  bool clean_text = true;            ///< drop NUL, U+FFFD and control characters; whitespace becomes " "
  bool handle_chinese_chars = true;  ///< put spaces around each CJK ideograph, making it a word
  bool strip_accents = true;         ///< NFD, then drop nonspacing marks (tokenizer.json's null: follow lowercase)
  bool lowercase = true;             ///< each character's full lowercase (U+0130 becomes "i" + U+0307)
};

/// A BERT WordPiece tokenizer: text to the ids a BERT-family encoder reads.
class QKV_API WordPieceTokenizer {
 public:
  /// Reads a Hugging Face tokenizer.json: model "WordPiece", normalizer
  /// "BertNormalizer" (or null), pre_tokenizer "BertPreTokenizer",
  /// post_processor "TemplateProcessing" or "BertProcessing" (or null: no
  /// special tokens added). Anything else, or a field of the wrong type, is
  /// a qkv::Error starting with 'name_for_errors': and naming the field
  /// (e.g. "normalizer.type"). "padding" and "decoder" are not used;
  /// "truncation" is kept as truncation_max_length().
  static WordPieceTokenizer from_json(const std::string& json, const std::string& name_for_errors);

  /// A vocab.txt (one token per line, the line number is the id) with
  /// BERT's defaults: "[UNK]", "##", 100 characters per word, [CLS] ... [SEP],
  /// and the special tokens "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" kept
  /// whole in the text. `lowercase` also sets strip_accents, as BERT does.
  /// Errors (no "[UNK]", "[CLS]" or "[SEP]", a repeated token) start with
  /// 'name_for_errors':.
  static WordPieceTokenizer from_vocab_txt(const std::string& text, bool lowercase,
                                           const std::string& name_for_errors);

  /// The tokenizer of a Hugging Face model folder: its tokenizer.json if
  /// present, else its vocab.txt (lowercase from tokenizer_config.json's
  /// "do_lower_case" when that file has it, else true); neither is a
  /// qkv::Error naming both.
  static WordPieceTokenizer from_folder(const std::string& dir);

  /// The ids of `utf8`: [CLS], the word pieces, [SEP] (as the post-processor
  /// adds them). With max_length > 0 the result holds at most max_length ids,
  /// special tokens included, keeping the first word pieces (as `tokenizers`
  /// truncates); *truncated (when given) says whether pieces were dropped.
  /// A max_length smaller than the special tokens alone is a qkv::Error.
  std::vector<int32_t> encode(const std::string& utf8, int64_t max_length = 0, bool* truncated = nullptr) const;

  /// The token string of `id` (e.g. "##ing"); an id outside
  /// [0, vocab_size()) is a qkv::Error.
  const std::string& token(int32_t id) const;
  /// The id of token string `token`, or -1 when the vocabulary lacks it.
  int32_t token_id(const std::string& token) const;

  /// Ids are 0 .. vocab_size() - 1 (the model's vocabulary and any added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  /// The id of "[CLS]", or -1 when the vocabulary lacks it.
  int32_t cls_id() const { return token_id("[CLS]"); }
  /// The id of "[SEP]", or -1 when the vocabulary lacks it.
  int32_t sep_id() const { return token_id("[SEP]"); }
  /// The padding id: tokenizer.json's padding.pad_id, else that of "[PAD]", else -1.
  int32_t pad_id() const { return pad_id_; }
  /// The id of the model's unknown token (e.g. "[UNK]").
  int32_t unk_id() const { return unk_id_; }
  /// tokenizer.json's truncation.max_length, 0 when it has none: what
  /// `tokenizers` would cut to by default. encode() does not apply it.
  int64_t truncation_max_length() const { return truncation_max_length_; }
  /// The normalizer's switches.
  const BertNormalizerOptions& normalizer() const { return normalizer_; }

 private:
  WordPieceTokenizer() = default;
  // Greedy longest-match pieces of one pre-tokenized word, appended to ids.
  void word_pieces(const std::u32string& word, std::vector<int32_t>& ids) const;
  // The word pieces of text with no added token in it.
  void encode_segment(const std::u32string& text, std::vector<int32_t>& ids) const;

  std::vector<std::string> tokens_;                // id -> token
  std::unordered_map<std::string, int32_t> ids_;   // token -> id
  std::vector<std::u32string> added_;              // kept whole in the raw text
  std::vector<int32_t> added_ids_;                 // their ids
  std::vector<int32_t> prefix_ids_, suffix_ids_;   // around the word pieces: [CLS], [SEP]
  BertNormalizerOptions normalizer_;
  std::string subword_prefix_ = "##";
  int64_t max_input_chars_per_word_ = 100;
  int32_t unk_id_ = -1;
  int32_t pad_id_ = -1;
  int64_t truncation_max_length_ = 0;
};

}  // namespace qkv
