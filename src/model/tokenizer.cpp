#include "qkv/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "io/json_strict.h"
#include "qkv/error.h"

namespace qkv {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacement = 0xFFFD;  // what unknown_id() decodes to

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

std::string code_point_name(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

std::string utf8_of(char32_t c) {
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

// Calls fn(code point) for each character of `s`, which must be UTF-8 as
// Unicode defines it (Table 3-7): shortest form only, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. Anything else throws, naming the
// byte offset of the bad sequence and its line.
template <class Fn>
void for_each_code_point(std::string_view s, Fn fn) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  size_t pos = 0;
  const auto fail = [&](const std::string& why) {
    const auto line = 1 + std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(pos), '\n');
    throw Error("invalid UTF-8 at byte " + std::to_string(pos) + " (line " + std::to_string(line) + "): " + why);
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

}  // namespace

CharTokenizer::CharTokenizer(std::vector<char32_t> chars, bool unknown_token)
    : chars_(std::move(chars)), unknown_(unknown_token), ascii_ids_(128, -1) {
  for (size_t i = 0; i < chars_.size(); ++i) {
    pieces_.push_back(utf8_of(chars_[i]));
    if (chars_[i] < 128) ascii_ids_[chars_[i]] = static_cast<int32_t>(i);
  }
  if (unknown_) pieces_.push_back(utf8_of(kReplacement));
}

CharTokenizer CharTokenizer::from_text(const std::string& utf8, bool unknown_token) {
  // One flag per code point (1.1 M bits, 136 KiB): the vocabulary of any
  // text in fixed memory, where a list of its non-ASCII characters could
  // grow to twice the text.
  std::vector<bool> seen(0x110000, false);
  for_each_code_point(utf8, [&](char32_t c) { seen[c] = true; });
  std::vector<char32_t> chars;
  for (char32_t c = 0; c < 0x110000; ++c)
    if (seen[c]) chars.push_back(c);
  if (chars.empty()) throw Error("no characters: the text is empty, so there is no vocabulary to build");
  return CharTokenizer(std::move(chars), unknown_token);
}

std::vector<int32_t> CharTokenizer::encode(const std::string& utf8) const {
  std::vector<int32_t> ids;
  ids.reserve(utf8.size());
  for_each_code_point(utf8, [&](char32_t c) {
    int32_t id = -1;
    if (c < 128) {
      id = ascii_ids_[c];
    } else {
      const auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
      if (it != chars_.end() && *it == c) id = static_cast<int32_t>(it - chars_.begin());
    }
    if (id < 0 && !unknown_)
      throw Error("character " + code_point_name(c) + " at position " + std::to_string(ids.size()) +
                  " is not in the vocabulary, which has no unknown token to read it as");
    ids.push_back(id >= 0 ? id : unknown_id());
  });
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      throw Error("decode: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
    out += pieces_[static_cast<size_t>(ids[i])];
  }
  return out;
}

std::string CharTokenizer::to_json() const {
  // ordered_json keeps "type" first; ensure_ascii writes every character
  // beyond ASCII as \uXXXX, so the file is plain ASCII whatever the text.
  nlohmann::ordered_json j;
  j["type"] = "char";
  j["chars"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < chars_.size(); ++i) j["chars"].push_back(pieces_[i]);
  if (unknown_) j["unknown"] = utf8_of(kReplacement);
  else j["unknown"] = nullptr;
  return j.dump(-1, ' ', /*ensure_ascii=*/true) + "\n";
}

CharTokenizer CharTokenizer::from_json(const std::string& json, const std::string& name_for_errors) {
  const std::string pre = "'" + name_for_errors + "': bad vocabulary: ";
  const auto fail = [&](const std::string& why) { throw Error(pre + why); };
  const nlohmann::json j = [&] {
    try {
      return parse_json_strict(json, /*max_depth=*/2);  // root object -> "chars" array
    } catch (const Error& e) {
      throw Error(pre + e.what());
    }
  }();
  if (!j.is_object()) fail(std::string("expected a JSON object, found a JSON ") + j.type_name());
  for (const auto& [key, value] : j.items())
    if (key != "type" && key != "chars" && key != "unknown")
      fail("unexpected key " + json_excerpt(nlohmann::json(key), 40) + " (expected \"type\", \"chars\", \"unknown\")");
  for (const char* key : {"type", "chars", "unknown"})
    if (!j.contains(key)) fail(std::string("missing \"") + key + "\"");

  const nlohmann::json& type = j["type"];
  if (!type.is_string() || type.get<std::string>() != "char")
    fail("\"type\" must be \"char\" (qkv's character tokenizer), found " + json_excerpt(type));
  const nlohmann::json& unknown = j["unknown"];
  if (!unknown.is_null() && (!unknown.is_string() || unknown.get<std::string>() != utf8_of(kReplacement)))
    fail("\"unknown\" must be \"\\uFFFD\" or null (no fallback id), found " + json_excerpt(unknown));

  const nlohmann::json& list = j["chars"];
  if (!list.is_array() || list.empty())
    fail("\"chars\" must be a non-empty list of one-character strings, found " +
         (list.is_array() ? std::string("[]") : std::string("a JSON ") + list.type_name()));
  std::vector<char32_t> chars;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "chars[" + std::to_string(i) + "]";
    if (!list[i].is_string()) fail(at + " must be a string, found a JSON " + std::string(list[i].type_name()));
    // nlohmann has already checked the string is valid UTF-8.
    std::vector<char32_t> cps;
    for_each_code_point(list[i].get<std::string>(), [&](char32_t c) { cps.push_back(c); });
    if (cps.size() != 1)
      fail(at + " must be exactly one character, found " + std::to_string(cps.size()) + " in " +
           json_excerpt(list[i]));
    if (!chars.empty() && cps[0] <= chars.back())
      fail(at + " " + code_point_name(cps[0]) + " does not come after chars[" + std::to_string(i - 1) + "] " +
           code_point_name(chars.back()) + ": characters must be distinct and in code-point order");
    chars.push_back(cps[0]);
  }
  return CharTokenizer(std::move(chars), !unknown.is_null());
}

}  // namespace qkv
