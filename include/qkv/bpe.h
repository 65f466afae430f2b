// qkv/bpe.h: byte-pair-encoding tokenizers read from a Hugging Face
// tokenizer.json, giving the ids the `tokenizers` library gives.
//
// A tokenizer.json names a pipeline, and this class runs the same one:
//   added tokens -> normalizer -> pre_tokenizer -> model (BPE) -> decoder.
// Supported, which covers GPT-2, Llama 3 and Llama 1/2 checkpoints:
//   - added tokens ("<|endoftext|>", "<|begin_of_text|>", "<s>"): found in
//     the text first, longest match at the leftmost place, and never split;
//   - normalizer: null, Prepend, Replace (string patterns), Sequence;
//   - pre_tokenizer: null; ByteLevel (GPT-2's split rule, each byte of a
//     piece one symbol); Split with GPT-2's or Llama 3's pattern (recognised
//     by its exact text: the patterns are implemented by hand over Unicode
//     categories, not by a regex engine), behavior Isolated; Sequence;
//     Metaspace (on its own);
//   - model: BPE with merges, unk_token, fuse_unk, byte_fallback (<0xNN>
//     tokens for a character outside the vocabulary) and ignore_merges;
//   - decoder: ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace,
//     Sequence;
//   - post_processor: ByteLevel (offsets only), TemplateProcessing's
//     single-sequence template (Llama's "<|begin_of_text|> $A"), Sequence.
// Anything else in the file (another model, normalizer, pre-tokenizer or
// decoder, a regex this class does not know, BPE dropout, an added token
// with lstrip, rstrip or single_word) is a qkv::Error naming the field.
//
// Letters, numbers and white space are Unicode's categories as utf8proc
// knows them (Unicode 15.0 in utf8proc 2.8); tokenizers 0.23's regex engine
// knows Unicode 16.0, so text with characters new in 16.0 (Garay, Kirat Rai,
// more Egyptian hieroglyphs, ...) may split differently.
//
// encode() gives the text's own ids, as tokenizers' encode(text,
// add_special_tokens=False) does; encode_with_specials() adds what the
// post_processor puts around them, as its encode(text) does by default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/export.h"
#include "qkv/gguf.h"

namespace qkv {


/// A BPE tokenizer as described by a Hugging Face tokenizer.json. Immutable
/// once read; copies share the tables, and encode()/decode() may run on
/// several threads at once.
class QKV_API BpeTokenizer {
 public:
  /// Reads the text of a tokenizer.json. Throws qkv::Error, starting with
  /// `name_for_errors`: , on JSON it cannot read and on any field it does
  /// not implement (the message names the field, e.g.
  /// "normalizer.type: \"NFKC\" is not supported").
  static BpeTokenizer from_json(const std::string& json, const std::string& name_for_errors);

  /// Reads `dir`/tokenizer.json, and the names of the beginning- and
  /// end-of-text tokens from `dir`/tokenizer_config.json ("bos_token",
  /// "eos_token", as a string or as {"content": ...}), each name it lacks
  /// from `dir`/special_tokens_map.json. Either file may be absent. A GPT-2
  /// folder without tokenizer.json is read from its vocab.json and
  /// merges.txt, as transformers converts them (byte-level BPE; the config's
  /// bos/eos/unk tokens, or "<|endoftext|>", as special added tokens).
  static BpeTokenizer from_folder(const std::string& dir);

  /// The tokenizer a GGUF file's metadata describes (tokenizer.ggml.*):
  /// model "gpt2" (byte-level BPE: tokens, merges, token_type), the
  /// pre-tokenizer "tokenizer.ggml.pre" names ("gpt-2", or Llama 3's
  /// "llama-bpe"), bos/eos ids, add_bos_token / add_eos_token. CONTROL
  /// tokens are special added tokens, USER_DEFINED ones added tokens. Any
  /// other model or pre-tokenizer is a qkv::Error naming the field.
  static BpeTokenizer from_gguf(const GgufFile& file);
  /// The tokenizer.ggml.* metadata of this tokenizer, padded with unused
  /// tokens ("[PAD<id>]") to `vocab` ids, what from_gguf reads back as the
  /// same tokenizer: a byte-level BPE with GPT-2's, SmolLM's, Llama 3's or
  /// Qwen2's split and no normalizer (GGUF's "gpt2" model), or a
  /// SentencePiece BPE with byte fallback as transformers converts Llama 2's,
  /// TinyLlama's or Mistral's (GGUF's "llama": a score for each piece instead
  /// of merges); a post-processor that adds at most bos in front and eos at
  /// the end. Any other is a qkv::Error naming what GGUF cannot say.
  std::vector<std::pair<std::string, GgufValue>> gguf_metadata(int64_t vocab) const;

  /// The ids of UTF-8 text: added tokens first, then each stretch between
  /// them through the normalizer, pre-tokenizer and BPE. Invalid UTF-8 is a
  /// qkv::Error naming the byte offset.
  std::vector<int32_t> encode(const std::string& utf8) const;

  /// encode(), with the special tokens the post_processor puts before and
  /// after the text's ids (Llama's beginning-of-text token), as a model
  /// reads a prompt. With max_length > 0 the text's ids are cut so that
  /// the whole is at most max_length ids, the special tokens kept, as
  /// tokenizers truncates; *truncated, when given, says whether they were.
  /// A max_length that leaves no room for one text id is a qkv::Error.
  std::vector<int32_t> encode_with_specials(const std::string& utf8, int64_t max_length = 0,
                                            bool* truncated = nullptr) const;

  /// The text of `ids` through the file's decoder. Byte sequences that are
  /// not UTF-8 become U+FFFD, as tokenizers' decoders do. With
  /// `skip_special`, special added tokens are left out. An id that names no
  /// token is a qkv::Error naming its position.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  /// How many of the leading ids of `ids` have text that no id appended
  /// later can change, so that decode() of them is a prefix of decode() of
  /// any continuation: all but a trailing run of byte-fallback tokens
  /// (<0xNN>: a run decodes as a whole, as UTF-8 or one U+FFFD per byte),
  /// and for byte-level BPE all but the tokens that hold the start of an
  /// unfinished character at the end. Special tokens count as decode() with
  /// the same `skip_special` sees them. An id that names no token is a
  /// qkv::Error.
  size_t settled(const std::vector<int32_t>& ids, bool skip_special = false) const;

  /// The token of `id` as the file spells it (GPT-2's "Ġthe", not " the").
  /// Throws qkv::Error for an id that names no token.
  std::string token(int32_t id) const;

  /// The bytes token `id` stands for in a text: the decoder's steps that act
  /// on one token (ByteLevel, ByteFallback, Replace, Metaspace) applied to
  /// it alone, as for a token in mid-text (no Strip, no dropped first
  /// Metaspace mark): GPT-2's "Ġthe" and Llama 2's "▁the" are " the", Llama
  /// 2's "<0xE2>" is the byte 0xE2. A byte-level or byte-fallback token may
  /// hold part of a character: the bytes need not be whole UTF-8. Throws
  /// qkv::Error for an id that names no token.
  std::string token_bytes(int32_t id) const;

  /// Whether `id` names a token (of the vocabulary or an added one): ids
  /// past vocab_size(), or in a gap of the vocabulary, have no text.
  bool has_token(int32_t id) const;

  /// One more than the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;

  /// The beginning-of-text id named by from_folder()'s config files, or -1.
  int32_t bos_id() const;
  /// The end-of-text id named by from_folder()'s config files, or -1.
  int32_t eos_id() const;

  /// The tables, shared by copies (defined in src/text/bpe/bpe_impl.h).
  struct Impl;

 private:
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

/// The text of a growing sequence of ids, handed out in pieces that are
/// final: push() each id as it comes and show what it returns, then show
/// finish(). The pieces put together are exactly tok.decode(ids,
/// skip_special); each is whole UTF-8 characters, so a stream never shows a
/// partial character or a U+FFFD that a later byte would have completed.
/// Text waits while it may still change (see BpeTokenizer::settled).
class QKV_API BpeTextStream {
 public:
  /// A stream of `tok`'s text, special tokens left out with `skip_special`.
  BpeTextStream(BpeTokenizer tok, bool skip_special);
  /// Appends `id`; returns the text that became final ("" when none). An id
  /// that names no token is a qkv::Error.
  std::string push(int32_t id);
  /// The rest of the text, now that no id follows.
  std::string finish();
  const std::vector<int32_t>& ids() const { return ids_; }  ///< every id pushed
  const std::string& text() const { return shown_; }         ///< every piece handed out so far

 private:
  std::string take(const std::string& text);

  BpeTokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t settled_ = 0;
  std::string shown_;
};

}  // namespace qkv
