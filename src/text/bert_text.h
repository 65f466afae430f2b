// BERT's text pipeline before the vocabulary: the normalizer and the
// pre-tokenizer of tokenizer.json ("BertNormalizer", "BertPreTokenizer"),
// on code points. Each character property is the one Hugging Face's
// `tokenizers` uses, answered by utf8proc's Unicode tables (corrected to the
// Unicode 8.0 categories `tokenizers` has, bert_unicode8.inc).
#pragma once

#include <string>
#include <vector>

#include "qkv/wordpiece.h"

namespace qkv::bert {

// Rust's char::is_whitespace (the White_Space property), with \t \n \r.
bool is_whitespace(char32_t c);
// Control, format and private-use characters (Cc, Cf, Co), but not \t \n \r.
bool is_control(char32_t c);
// ASCII punctuation and symbols (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) and
// every Unicode punctuation category (Pc Pd Ps Pe Pi Pf Po).
bool is_punctuation(char32_t c);
// The CJK ideograph blocks BERT splits into one word per character, as
// `tokenizers` lists them (U+2B820..U+2B91F is not among them).
bool is_cjk(char32_t c);

// BertNormalizer: clean, space out CJK, strip accents, lowercase, in that order.
std::u32string normalize(const std::u32string& text, const BertNormalizerOptions& options);

// BertPreTokenizer: the words of normalized text, split on whitespace, each
// punctuation character a word of its own.
std::vector<std::u32string> pre_tokenize(const std::u32string& text);

}  // namespace qkv::bert
