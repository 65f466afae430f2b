#include "text/bert_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "text/utf8.h"
#include "qkv/error.h"

namespace qkv::bert {
namespace {

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

// What BERT asks of a character besides whitespace.
enum class Class : uint8_t { none, control, mark, punct };

// `tokenizers` reads these classes from Unicode 8.0's tables, utf8proc from
// a newer Unicode: a character assigned since (U+2E43, U+07FD, ...) is no
// class at all in `tokenizers`. The ranges where the two differ, from
// scripts/gen_bert_unicode8.py, sorted.
struct Range {
  char32_t first, last;
  Class cls;
};
constexpr Range kUnicode8[] = {
#include "text/bert_unicode8.inc"
};

Class char_class(char32_t c) {
  const auto it = std::upper_bound(std::begin(kUnicode8), std::end(kUnicode8), c,
                                   [](char32_t x, const Range& r) { return x < r.first; });
  if (it != std::begin(kUnicode8) && c <= std::prev(it)->last) return std::prev(it)->cls;
  const auto cat = category(c);
  if (cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO) return Class::control;
  if (cat == UTF8PROC_CATEGORY_MN) return Class::mark;
  if (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) return Class::punct;
  return Class::none;
}

// Canonical decomposition, marks in canonical order (NFD). utf8proc reads
// UTF-8, so the text goes there and back.
std::u32string nfd(const std::u32string& text) {
  std::string bytes;
  for (char32_t c : text) bytes += utf8::utf8_of(c);
  // utf8proc returns the length it needs when the buffer is too small.
  std::vector<utf8proc_int32_t> out(text.size() * 2 + 1);
  utf8proc_ssize_t n = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    n = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(bytes.data()),
                           static_cast<utf8proc_ssize_t>(bytes.size()), out.data(),
                           static_cast<utf8proc_ssize_t>(out.size()), UTF8PROC_DECOMPOSE);
    if (n < 0) throw Error(std::string("NFD decomposition failed: ") + utf8proc_errmsg(n));
    if (static_cast<size_t>(n) <= out.size()) break;
    out.resize(static_cast<size_t>(n));
  }
  return std::u32string(out.begin(), out.begin() + n);
}

// Rust's char::to_lowercase: the simple mapping of UnicodeData.txt, except
// the one unconditional many-character lowercase of SpecialCasing.txt,
// U+0130 (capital I with dot above) -> "i" + U+0307 (combining dot above).
void append_lowercase(char32_t c, std::u32string& out) {
  if (c == 0x130) {
    out += U'i';
    out += char32_t{0x307};
    return;
  }
  out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

}  // namespace

bool is_whitespace(char32_t c) {
  // White_Space is exactly Zs, Zl, Zp, U+0009..U+000D and U+0085.
  if ((c >= 0x9 && c <= 0xD) || c == 0x85) return true;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  return char_class(c) == Class::control;
}

bool is_punctuation(char32_t c) {
  // ASCII symbols ($ + < = > ^ ` | ~) count too: BERT splits them off.
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return char_class(c) == Class::punct;
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string normalize(const std::u32string& text, const BertNormalizerOptions& options) {
  std::u32string s;
  s.reserve(text.size());
  for (char32_t c : text) {
    if (options.clean_text) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = U' ';
    }
    if (options.handle_chinese_chars && is_cjk(c)) {
      s += U' ';
      s += c;
      s += U' ';
    } else {
      s += c;
    }
  }
  if (options.strip_accents) {
    std::u32string kept;
    for (char32_t c : nfd(s))
      if (char_class(c) != Class::mark) kept += c;
    s = std::move(kept);
  }
  if (options.lowercase) {
    std::u32string lower;
    lower.reserve(s.size());
    for (char32_t c : s) append_lowercase(c, lower);
    s = std::move(lower);
  }
  return s;
}

std::vector<std::u32string> pre_tokenize(const std::u32string& text) {
  std::vector<std::u32string> words;
  std::u32string word;
  const auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (char32_t c : text) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      words.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  flush();
  return words;
}

}  // namespace qkv::bert
