#include "io/npy_header.h"

#include <cctype>
#include <cstdint>
#include <limits>

#include "qkv/error.h"

namespace qkv {
namespace {

class DictParser {
 public:
  // The padding spaces and '\n' after the dict are dropped up front so that
  // messages do not show them.
  DictParser(std::string_view text, const std::string& name)
      : text_(text.substr(0, text.find_last_not_of(" \n") + 1)), name_(name) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    if (!accept('{')) fail("header is not a dict: expected '{', found " + found());
    while (true) {
      skip_space();
      if (accept('}')) break;
      if (!at('\'') && !at('"')) fail("expected a quoted key or '}', found " + found());
      const std::string key = parse_string();
      skip_space();
      if (!accept(':')) fail("expected ':' after key '" + key + "', found " + found());
      skip_space();
      if (key == "descr") {
        mark(seen_descr, key);
        if (at('[')) fail("structured dtypes (a list of fields in 'descr') are not supported");
        if (!at('\'') && !at('"')) fail("'descr': expected a dtype string such as '<f4', found " + found());
        h.descr = parse_string();
      } else if (key == "fortran_order") {
        mark(seen_fortran, key);
        h.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark(seen_shape, key);
        h.shape = parse_shape();
      } else {
        fail("unexpected key '" + key + "' (a .npy header has only 'descr', 'fortran_order', 'shape')");
      }
      skip_space();
      if (accept('}')) break;
      if (!accept(',')) fail("expected ',' or '}' after the value of '" + key + "', found " + found());
    }
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the dict: " + found());
    if (!seen_descr) fail("missing key 'descr'");
    if (!seen_fortran) fail("missing key 'fortran_order'");
    if (!seen_shape) fail("missing key 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("'" + name_ + "': bad .npy header: " + what + "; header is " + quoted(text_, 120));
  }

  std::string found() const {
    if (pos_ >= text_.size()) return "the end of the header";
    return quoted(text_.substr(pos_), 12);
  }

  bool at(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool accept(char c) {
    if (!at(c)) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  void mark(bool& seen, const std::string& key) const {
    if (seen) fail("key '" + key + "' appears twice");
    seen = true;
  }

  // At an opening quote. NumPy's keys and dtype strings never need escapes,
  // but a backslash still escapes the next character as in Python.
  std::string parse_string() {
    const char quote = text_[pos_++];
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      s += text_[pos_++];
    }
    if (!accept(quote)) fail("unterminated string " + quoted(s, 20));
    return s;
  }

  bool parse_bool() {
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::string_view w = word;
      if (text_.substr(pos_, w.size()) == w) {
        pos_ += w.size();
        return value;
      }
    }
    fail("'fortran_order': expected True or False, found " + found());
  }

  // A Python tuple of ints: (), (3,), (2, 3) or (2, 3, ).
  Shape parse_shape() {
    if (!accept('(')) fail("'shape': expected a tuple such as (2, 3), found " + found());
    Shape shape;
    while (true) {
      skip_space();
      if (accept(')')) return shape;
      shape.push_back(parse_dim());
      skip_space();
      if (accept(')')) return shape;
      if (!accept(',')) fail("'shape': expected ',' or ')' after a dimension, found " + found());
    }
  }

  int64_t parse_dim() {
    const bool negative = accept('-');
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_])))
      fail("'shape': expected an integer or ')', found " + found());
    int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int digit = text_[pos_++] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10)
        fail("'shape': dimension does not fit in 64 bits");
      v = v * 10 + digit;
    }
    accept('L');  // Python 2 wrote longs as 3L
    if (negative && v != 0) fail("'shape': negative dimension -" + std::to_string(v));
    return v;
  }

  std::string_view text_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace

std::string quoted(std::string_view s, size_t limit) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      const char* hex = "0123456789abcdef";
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    } else {
      if (c == '"' || c == '\\') out += '\\';
      out += static_cast<char>(c);
    }
  }
  return out + (s.size() > limit ? "...\"" : "\"");
}

NpyHeader parse_npy_header(std::string_view text, const std::string& name) {
  return DictParser(text, name).parse();
}

}  // namespace qkv
