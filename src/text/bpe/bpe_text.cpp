// Repairing UTF-8 as tokenizers' decoders do, GPT-2's byte-to-character map,
// and the bytes that byte-level and byte-fallback tokens stand for.
#include <cctype>
#include <string>
#include <unordered_map>

#include "text/bpe/bpe_impl.h"

namespace qkv::bpe {
namespace {

// The length of a sequence that starts with lead byte `b`, and the range
// its second byte must fall in (Unicode's Table 3-7, which rules out
// overlong forms, surrogates and code points past U+10FFFF); 0 for a byte
// that cannot start a sequence.
struct Lead {
  int len;
  unsigned char lo, hi;
};
Lead lead(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// The length of the well-formed sequence at `i`, or, when it is not
// well-formed, minus the length of its maximal ill-formed prefix (>= 1).
int sequence_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  const Lead l = lead(b);
  if (l.len == 0) return -1;
  int k = 1;
  for (; k < l.len && i + k < s.size(); ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    const unsigned char lo = k == 1 ? l.lo : 0x80, hi = k == 1 ? l.hi : 0xBF;
    if (c < lo || c > hi) return -k;
  }
  return k == l.len ? k : -k;
}

}  // namespace

void append_utf8_lossy(std::string_view bytes, std::string& out) {
  for (size_t i = 0; i < bytes.size();) {
    const int len = sequence_at(bytes, i);
    if (len > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(len)));
      i += static_cast<size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += static_cast<size_t>(-len);
    }
  }
}

const std::array<std::string, 256>& byte_level_chars() {
  // Printable bytes stand for themselves; the 68 others (controls, the
  // space, DEL, 0x80-0xA0, the soft hyphen 0xAD) for U+0100 onwards, in order.
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> c;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      if (cp < 0x80) {
        c[b] = std::string(1, static_cast<char>(cp));
      } else {
        c[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      }
    }
    return c;
  }();
  return chars;
}

bool byte_level_to_bytes(const std::string& token, std::string& out) {
  static const std::unordered_map<std::string, char> char_byte = [] {
    std::unordered_map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m[byte_level_chars()[b]] = static_cast<char>(b);
    return m;
  }();
  out.clear();
  for (size_t i = 0; i < token.size();) {
    const auto b = static_cast<unsigned char>(token[i]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    const auto it = char_byte.find(token.substr(i, len));
    if (it == char_byte.end()) return false;
    out += it->second;
    i += len;
  }
  return true;
}

std::string byte_level_bytes(const std::string& token) {
  std::string bytes;
  return byte_level_to_bytes(token, bytes) ? bytes : token;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

int fallback_byte(const std::string& token) {
  const auto hex = [&](size_t i) { return std::isxdigit(static_cast<unsigned char>(token[i])) != 0; };
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>' || !hex(3) || !hex(4)) return -1;
  return std::stoi(token.substr(3, 2), nullptr, 16);
}

int unfinished_utf8_tail(std::string_view bytes) {
  // A character is at most 4 bytes: its lead byte is among the last 3.
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const size_t i = bytes.size() - back;
    const auto b = static_cast<unsigned char>(bytes[i]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
    const int len = sequence_at(bytes, i);
    return len < 0 && -len == static_cast<int>(back) && lead(b).len > static_cast<int>(back)
               ? static_cast<int>(back)
               : 0;
  }
  return 0;
}

}  // namespace qkv::bpe
