// UTF-8 as the tokenizers read it: one strict decoder (invalid input is an
// error naming its byte offset, never replaced) and the encoder back.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

#include "qkv/error.h"

namespace qkv::utf8 {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

inline std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

inline std::string code_point_name(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

inline std::string utf8_of(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Where a decoding error says the bad sequence is. A text of one line (no
// "\n": a prompt, or a line a caller names itself, "--input line 3: ") gives
// its byte offset in that line; a text of several lines names the line once,
// with the offset in that line and in the whole text.
inline std::string utf8_position(std::string_view s, size_t pos) {
  const size_t line_start = pos == 0 ? 0 : s.rfind('\n', pos - 1) + 1;  // npos + 1 == 0
  if (s.find('\n') == std::string_view::npos) return "byte " + std::to_string(pos) + " of the line";
  const auto line = 1 + std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(pos), '\n');
  return "byte " + std::to_string(pos - line_start) + " of line " + std::to_string(line) +
         (line > 1 ? " (byte " + std::to_string(pos) + " of the text)" : std::string());
}

// Calls fn(code point) for each character of `s`, which must be UTF-8 as
// Unicode defines it (Table 3-7): shortest form only, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. Anything else throws, naming
// where the bad sequence is (utf8_position) and what is wrong with it.
template <class Fn>
void for_each_code_point(std::string_view s, Fn fn) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  size_t pos = 0;
  const auto fail = [&](const std::string& why) {
    throw Error("invalid UTF-8 at " + utf8_position(s, pos) + ": " + why);
  };
  while (pos < s.size()) {
    const unsigned char b0 = byte(pos);
    if (b0 < 0x80) {
      fn(char32_t{b0});
      ++pos;
      continue;
    }
    if (b0 < 0xC0) fail("stray continuation byte " + hex_byte(b0) + " with no lead byte before it");
    if (b0 >= 0xF8) fail("byte " + hex_byte(b0) + " never occurs in UTF-8");
    const size_t len = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    char32_t c = b0 & (0xFF >> (len + 1));
    std::string seq = hex_byte(b0);
    for (size_t k = 1; k < len; ++k) {
      if (pos + k >= s.size())
        fail("truncated sequence: lead byte " + hex_byte(b0) + " starts " + std::to_string(len) +
             " bytes, the text ends after " + std::to_string(k));
      const unsigned char b = byte(pos + k);
      if ((b & 0xC0) != 0x80)
        fail("lead byte " + hex_byte(b0) + " starts " + std::to_string(len) + " bytes, byte " + std::to_string(k + 1) +
             " is " + hex_byte(b) + ", not a continuation byte (0x80-0xbf)");
      c = (c << 6) | (b & 0x3F);
      seq += ' ';
      seq += hex_byte(b);
    }
    static constexpr char32_t kShortest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kShortest[len])
      fail("overlong encoding " + seq + " of " + code_point_name(c) + " (UTF-8 allows only the shortest form)");
    if (c >= 0xD800 && c <= 0xDFFF) fail(seq + " encodes the UTF-16 surrogate " + code_point_name(c));
    if (c > kMaxCodePoint) fail(seq + " encodes " + code_point_name(c) + ", beyond U+10FFFF");
    fn(c);
    pos += len;
  }
}

}  // namespace qkv::utf8
