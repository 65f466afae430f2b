#include "qkv/tokenizer.h"

#include <algorithm>

#include "io/json_strict.h"
#include "text/utf8.h"
#include "qkv/error.h"

namespace qkv {
namespace {

using utf8::code_point_name;
using utf8::for_each_code_point;
using utf8::utf8_of;

constexpr char32_t kReplacement = 0xFFFD;  // what unknown_id() decodes to

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
