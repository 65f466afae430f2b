// template_processing.cpp: TemplateProcessing's single-sequence template
// (text/template_processing.h).
#include "text/template_processing.h"

#include "io/json_strict.h"
#include "qkv/error.h"

namespace qkv {

using json = nlohmann::json;

TemplateIds read_template_processing(const json& step, const std::string& where, const std::string& path,
                                     int64_t vocab_size, const std::function<bool(int64_t)>& names_token) {
  const auto fail = [&](const std::string& at, const std::string& why) {
    throw Error(where + at + ": " + why);
  };
  // step[key], which must be there.
  const auto get = [&](const json& obj, const std::string& at, const char* key) -> const json& {
    if (!obj.is_object()) fail(at, "expected an object, found " + json_excerpt(obj));
    const auto it = obj.find(key);
    if (it == obj.end()) fail(at, std::string("has no \"") + key + "\"");
    return *it;
  };
  const auto name_of = [&](const json& obj, const std::string& at) {
    const json& id = get(obj, at, "id");
    if (!id.is_string()) fail(at + ".id", "expected a string, found " + json_excerpt(id));
    return id.get<std::string>();
  };
  const json& specials = get(step, path, "special_tokens");
  if (!specials.is_object()) fail(path + ".special_tokens", "expected an object, found " + json_excerpt(specials));
  const json& single = get(step, path, "single");
  if (!single.is_array()) fail(path + ".single", "expected an array, found " + json_excerpt(single));
  TemplateIds out;
  bool sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item = path + ".single[" + std::to_string(i) + "]";
    const json& piece = single[i];
    if (!piece.is_object() || piece.size() != 1 || !(piece.contains("Sequence") || piece.contains("SpecialToken")))
      fail(item, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, found " + json_excerpt(piece));
    if (piece.contains("Sequence")) {
      if (sequence || name_of(piece["Sequence"], item + ".Sequence") != "A")
        fail(item, "a single-sequence template holds sequence \"A\" once");
      sequence = true;
      continue;
    }
    const std::string name = name_of(piece["SpecialToken"], item + ".SpecialToken");
    const auto it = specials.find(name);
    if (it == specials.end()) fail(item, json_excerpt(json(name), 40) + " is not in " + path + ".special_tokens");
    const std::string entry = path + ".special_tokens[" + json_excerpt(json(name), 40) + "]";
    const json& ids = get(*it, entry, "ids");
    if (!ids.is_array() || ids.empty()) fail(entry + ".ids", "expected a list of ids, found " + json_excerpt(ids));
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size ||
          !names_token(id.get<int64_t>()))
        fail(entry + ".ids", json_excerpt(id) + " names no token (vocab_size " + std::to_string(vocab_size) + ")");
      (sequence ? out.suffix : out.prefix).push_back(id.get<int32_t>());
    }
  }
  if (!sequence) fail(path + ".single", "has no sequence \"A\"");
  return out;
}

}  // namespace qkv
