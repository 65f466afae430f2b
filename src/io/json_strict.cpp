#include "io/json_strict.h"

#include <set>
#include <string>
#include <vector>

#include "io/npy_header.h"  // quoted()
#include "qkv/error.h"

namespace qkv {
namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] parse
// error at line 1, column 9: ..."; the bracketed id means nothing to a user.
// Returns the rest, starting with the separator that follows "not valid JSON".
// Its "last read: '...'" part escapes control characters but not bytes
// >= 0x80, so those are escaped here to keep the message one clean line.
std::string clean_message(const std::string& what) {
  std::string_view s = what;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string_view::npos) s.remove_prefix(close + 2);
  }
  // "parse error at line 1, column 9: ..." reads on as "not valid JSON at line ...".
  std::string out = ": ";
  if (s.substr(0, 12) == "parse error ") {
    s.remove_prefix(12);
    out = " ";
  }
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f) {
      const char* hex = "0123456789abcdef";
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, int max_depth) {
  using nlohmann::json;
  // One entry per open object: the keys seen so far and the key under which
  // the object itself sits (for the message).
  struct Open {
    std::set<std::string> keys;
    std::string name;
  };
  std::vector<Open> objects;
  std::string last_key;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= max_depth)
          throw Error("JSON nested deeper than " + std::to_string(max_depth) + " levels");
        if (event == json::parse_event_t::object_start) objects.push_back({{}, last_key});
        break;
      case json::parse_event_t::object_end:
        objects.pop_back();
        break;
      case json::parse_event_t::key: {
        last_key = parsed.get<std::string>();
        Open& o = objects.back();
        if (!o.keys.insert(last_key).second)
          throw Error("duplicate key " + quoted(last_key, 60) +
                      (objects.size() > 1 ? " (inside " + quoted(o.name, 60) + ")" : ""));
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw Error("not valid JSON" + clean_message(e.what()));
  }
}

std::string json_excerpt(const nlohmann::json& j, size_t limit) {
  std::string s = j.dump(-1, ' ', /*ensure_ascii=*/true);
  if (s.size() > limit) s = s.substr(0, limit - 3) + "...";
  return s;
}

}  // namespace qkv
