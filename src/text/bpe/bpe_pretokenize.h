// The split rules of GPT-2's, Llama 3's and Qwen2's pre-tokenizers: the regular
// expressions their tokenizer.json files name, and the Digits pre-tokenizer
// (SmolLM's), implemented by hand over Unicode categories (utf8proc), so no
// regex engine is needed.
#pragma once

#include <string_view>
#include <vector>

namespace qkv::bpe {

enum class SplitRule {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  Gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  // ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // Llama 3's with one digit a piece: \p{N} for \p{N}{1,3}
  Qwen2,
};
inline constexpr SplitRule kSplitRules[] = {SplitRule::Gpt2, SplitRule::Llama3, SplitRule::Qwen2};

// The rule's regular expression exactly as tokenizer.json spells it.
std::string_view split_pattern(SplitRule rule);

// Appends the pieces of `text` (valid UTF-8) to `out`: what the rule's
// regex matches, scanning left to right as a backtracking engine does
// (first alternative that matches, greedy repeats). The rules leave no
// character unmatched, so the pieces, joined, are `text`.
void split_pieces(std::string_view text, SplitRule rule, std::vector<std::string_view>& out);

// Appends the pieces tokenizers' Digits pre-tokenizer makes of `text`
// (valid UTF-8): each \p{N} character a piece (`individual`), or each run
// of them, and each run of other characters between them.
void split_digits(std::string_view text, bool individual, std::vector<std::string_view>& out);

}  // namespace qkv::bpe
