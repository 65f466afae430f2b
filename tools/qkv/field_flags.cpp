// field_flags.cpp: the library's field names replaced by the command's flags.
#include "field_flags.h"

#include <cctype>

namespace qkv::cli {
namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The flag for `word`, or nullptr when it is no field of the table.
const std::string* flag_of(const FieldFlags& flags, const std::string& word) {
  for (const auto& [field, flag] : flags)
    if (field == word) return &flag;
  return nullptr;
}

// The word starting at `at` (letters, digits, '_').
std::string word_at(const std::string& s, size_t at) {
  size_t end = at;
  while (end < s.size() && word_char(s[end])) ++end;
  return s.substr(at, end - at);
}

// Every whole-word field outside single quotes replaced by its flag. A
// quote opens after a non-word character and closes before one, so the
// apostrophe of "machine's" is no quote.
std::string replace_fields(const std::string& s, const FieldFlags& flags) {
  std::string out;
  bool quoted = false;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '\'' && !quoted && (i == 0 || !word_char(s[i - 1]))) quoted = true;
    else if (s[i] == '\'' && quoted && (i + 1 == s.size() || !word_char(s[i + 1]))) quoted = false;
    if (quoted || !word_char(s[i]) || (i > 0 && (word_char(s[i - 1]) || s[i - 1] == '-'))) {
      out += s[i++];
      continue;
    }
    const std::string w = word_at(s, i);
    const std::string* flag = flag_of(flags, w);
    out += flag ? *flag : w;
    i += w.size();
  }
  return out;
}

}  // namespace

std::string with_flags(const std::string& message, const FieldFlags& flags) {
  std::string rest = message;
  // "train options: iters must ..." -> "iters must ...": the context only
  // says which options the field belongs to, the flag says it all.
  const size_t colon = rest.find(": ");
  if (colon != std::string::npos && !flag_of(flags, rest.substr(0, colon)) &&
      flag_of(flags, word_at(rest, colon + 2)))
    rest.erase(0, colon + 2);
  const std::string first = word_at(rest, 0);
  const std::string* flag = flag_of(flags, first);
  if (!flag) return replace_fields(rest, flags);
  // "iters must be ..." or "iters: ..." -> "--iters: must be ..."
  size_t tail = first.size();
  if (rest.compare(tail, 1, ":") == 0) ++tail;
  while (tail < rest.size() && rest[tail] == ' ') ++tail;
  return *flag + ": " + replace_fields(rest.substr(tail), flags);
}

}  // namespace qkv::cli
