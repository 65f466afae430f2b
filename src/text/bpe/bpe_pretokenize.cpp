#include "text/bpe/bpe_pretokenize.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>

namespace qkv::bpe {
namespace {

// The four character classes the patterns tell apart: \p{L}, \p{N}, \s
// (Unicode's White_Space, which is what \s means to the regex engines
// tokenizers uses) and everything else.
enum class Cls : uint8_t { Letter, Number, Space, Other };

Cls classify(char32_t c) {
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return Cls::Letter;
    if (c >= '0' && c <= '9') return Cls::Number;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return Cls::Space;
    return Cls::Other;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return Cls::Letter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return Cls::Number;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return Cls::Space;
    default:
      return c == 0x85 ? Cls::Space : Cls::Other;  // NEL: White_Space, category Cc
  }
}

// The text as code points, their classes and byte offsets (n + 1 of them).
struct Chars {
  std::vector<char32_t> cp;
  std::vector<Cls> cls;
  std::vector<uint32_t> off;
  size_t n = 0;

  explicit Chars(std::string_view s) {
    cp.reserve(s.size());
    off.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size();) {
      const auto b = static_cast<unsigned char>(s[i]);
      const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      char32_t c = len == 1 ? b : b & (0x7F >> len);
      for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      cp.push_back(c);
      off.push_back(static_cast<uint32_t>(i));
      i += len;
    }
    off.push_back(static_cast<uint32_t>(s.size()));
    n = cp.size();
    cls.resize(n);
    for (size_t i = 0; i < n; ++i) cls[i] = classify(cp[i]);
  }

  bool is(size_t i, Cls c) const { return i < n && cls[i] == c; }
  bool line_break(size_t i) const { return i < n && (cp[i] == '\r' || cp[i] == '\n'); }
  // The end of the run of class c starting at i.
  size_t run(size_t i, Cls c) const {
    while (i < n && cls[i] == c) ++i;
    return i;
  }
};

// 's|'t|'re|'ve|'m|'ll|'d at i: the end of the match, or i. With `fold`,
// case-insensitive as (?i:...) is: Unicode simple case folding, under which
// U+017F (long s) is an s too.
size_t contraction(const Chars& t, size_t i, bool fold) {
  if (t.cp[i] != '\'') return i;
  const auto at = [&](size_t k) -> char32_t {
    if (k >= t.n) return 0;
    const char32_t c = t.cp[k];
    if (!fold) return c;
    if (c >= 'A' && c <= 'Z') return c | 0x20;
    return c == 0x17F ? U's' : c;
  };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  const char32_t b = at(i + 2);
  if (((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return i;
}

// \s+(?!\S)|\s+ at a white-space character: the whole run when it ends the
// text; otherwise all but its last character, which stays to lead the next
// piece (" world"), unless the run is that one character.
size_t spaces(const Chars& t, size_t i) {
  const size_t j = t.run(i, Cls::Space);
  return (j < t.n && j - i >= 2) ? j - 1 : j;
}

size_t gpt2_match(const Chars& t, size_t i) {
  if (const size_t j = contraction(t, i, false); j > i) return j;
  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: one class, after an optional space.
  if (t.cp[i] == ' ' && i + 1 < t.n && t.cls[i + 1] != Cls::Space) return t.run(i + 1, t.cls[i + 1]);
  if (t.cls[i] != Cls::Space) return t.run(i, t.cls[i]);
  return spaces(t, i);
}

// Llama 3's rule, numbers in pieces of up to `digits` (Qwen2's: 1).
size_t llama3_match(const Chars& t, size_t i, size_t digits) {
  if (const size_t j = contraction(t, i, true); j > i) return j;
  const Cls c = t.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c != Cls::Letter && c != Cls::Number && !t.line_break(i) && t.is(i + 1, Cls::Letter))
    return t.run(i + 1, Cls::Letter);
  if (c == Cls::Letter) return t.run(i, Cls::Letter);
  // \p{N}{1,digits}
  if (c == Cls::Number) return std::min(t.run(i, Cls::Number), i + digits);
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t k = (t.cp[i] == ' ' && t.is(i + 1, Cls::Other)) ? i + 1 : i;
  if (t.cls[k] == Cls::Other) {
    size_t j = t.run(k, Cls::Other);
    while (t.line_break(j)) ++j;
    return j;
  }
  // \s*[\r\n]+: up to the run's last line break, when it has one.
  const size_t j = t.run(i, Cls::Space);
  for (size_t m = j; m > i; --m)
    if (t.line_break(m - 1)) return m;
  return spaces(t, i);
}

}  // namespace

std::string_view split_pattern(SplitRule rule) {
  switch (rule) {
    case SplitRule::Gpt2:
      return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    case SplitRule::Llama3:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    case SplitRule::Qwen2:
      return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return {};
}

void split_pieces(std::string_view text, SplitRule rule, std::vector<std::string_view>& out) {
  const Chars t(text);
  for (size_t i = 0; i < t.n;) {
    const size_t j = rule == SplitRule::Gpt2 ? gpt2_match(t, i) : llama3_match(t, i, rule == SplitRule::Qwen2 ? 1 : 3);
    out.push_back(text.substr(t.off[i], t.off[j] - t.off[i]));
    i = j;
  }
}


void split_digits(std::string_view text, bool individual, std::vector<std::string_view>& out) {
  const Chars t(text);
  for (size_t i = 0; i < t.n;) {
    const bool digit = t.is(i, Cls::Number);
    size_t j = i + 1;  // a digit alone, or the run of digits or of other characters
    if (!(digit && individual))
      while (j < t.n && t.is(j, Cls::Number) == digit) ++j;
    out.push_back(text.substr(t.off[i], t.off[j] - t.off[i]));
    i = j;
  }
}

}  // namespace qkv::bpe
