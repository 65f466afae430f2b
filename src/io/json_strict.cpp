#include "io/json_strict.h"

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

// Builds the document from nlohmann's SAX events, checking depth and keys on
// the way. (nlohmann's own callback parser does the same checks but rescans
// the enclosing container after every object it closes: quadratic in, say, a
// tokenizer.json's tens of thousands of added tokens.)
class StrictBuilder {
 public:
  using json = nlohmann::json;
  explicit StrictBuilder(int max_depth) : max_depth_(max_depth) {}
  json take() { return std::move(root_); }

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(json::number_integer_t v) { return put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return put(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(v); }
  bool string(json::string_t& v) { return put(std::move(v)); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }
  bool start_object(size_t) { return open(json::value_t::object); }
  bool start_array(size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    json& object = *open_.back().value;
    if (object.contains(k))
      throw Error("duplicate key " + quoted(k, 60) +
                  (open_.size() > 1 ? " (inside " + quoted(open_.back().name, 60) + ")" : ""));
    slot_ = &object[k];
    last_key_ = std::move(k);
    return true;
  }
  [[noreturn]] bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    throw Error("not valid JSON" + clean_message(e.what()));
  }

 private:
  // An open object or array, and the key it sits under (for the message).
  struct Open {
    json* value;
    std::string name;
  };

  // Places a value where the document is: the root, an array's next element
  // or the slot of the key just read. Returns where it went.
  template <class V>
  json* place(V&& v) {
    if (open_.empty()) {
      root_ = json(std::forward<V>(v));
      return &root_;
    }
    json& parent = *open_.back().value;
    if (parent.is_array()) {
      parent.emplace_back(std::forward<V>(v));
      return &parent.back();
    }
    *slot_ = json(std::forward<V>(v));
    return slot_;
  }
  template <class V>
  bool put(V&& v) {
    place(std::forward<V>(v));
    return true;
  }
  bool open(json::value_t type) {
    if (static_cast<int>(open_.size()) >= max_depth_)
      throw Error("JSON nested deeper than " + std::to_string(max_depth_) + " levels");
    open_.push_back({place(type), last_key_});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  int max_depth_;
  json root_;
  std::vector<Open> open_;
  json* slot_ = nullptr;
  std::string last_key_;
};

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, int max_depth) {
  StrictBuilder builder(max_depth);
  nlohmann::json::sax_parse(text.begin(), text.end(), &builder, nlohmann::json::input_format_t::json,
                            /*strict=*/true, /*ignore_comments=*/false);
  return builder.take();
}

std::string json_excerpt(const nlohmann::json& j, size_t limit) {
  std::string s = j.dump(-1, ' ', /*ensure_ascii=*/true);
  if (s.size() > limit) s = s.substr(0, limit - 3) + "...";
  return s;
}

}  // namespace qkv
