// fuzz_tokenizer.cpp: libFuzzer target for the tokenizer on arbitrary bytes.
//
// The input is split at its first 0xFF byte (a byte never valid in UTF-8)
// into training text and other text. The tokenizer must accept exactly the
// valid UTF-8 (checked against the small decoder below, written from RFC
// 3629's table) and refuse the rest with qkv::Error. For accepted text,
// decode(encode(s)) == s when every character of s is in the vocabulary, and
// characters it never saw become U+FFFD. Anything else aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"

namespace {

// RFC 3629 section 4: the well-formed byte sequences, nothing else.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  auto cont = [&](size_t k, unsigned lo, unsigned hi) {
    if (i + k >= s.size()) return false;
    const unsigned b = static_cast<unsigned char>(s[i + k]);
    return b >= lo && b <= hi;
  };
  while (i < s.size()) {
    const unsigned b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    if (b <= 0x7F) n = 1;
    else if (b >= 0xC2 && b <= 0xDF) n = cont(1, 0x80, 0xBF) ? 2 : 0;
    else if (b == 0xE0) n = cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
      n = cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
    else if (b == 0xED) n = cont(1, 0x80, 0x9F) && cont(2, 0x80, 0xBF) ? 3 : 0;
    else if (b == 0xF0) n = cont(1, 0x90, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
    else if (b >= 0xF1 && b <= 0xF3)
      n = cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
    else if (b == 0xF4) n = cont(1, 0x80, 0x8F) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\xff');
  const std::string train = input.substr(0, cut);
  const std::string other = cut == std::string::npos ? std::string() : input.substr(cut + 1);

  // from_text refuses exactly the empty and the invalid training texts.
  const bool should_train = !train.empty() && valid_utf8(train);
  std::optional<qkv::CharTokenizer> tok;
  bool trained = true;
  try {
    tok.emplace(qkv::CharTokenizer::from_text(train));
  } catch (const qkv::Error&) {
    trained = false;
    tok.emplace(qkv::CharTokenizer::from_text("?"));
  }
  if (trained != should_train) std::abort();

  // The training text: every character is known, and the round trip is exact.
  if (trained) {
    const std::vector<int32_t> ids = tok->encode(train);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->unknown_id()) std::abort();
    if (tok->decode(ids) != train) std::abort();
  }

  // Other text: refused exactly when invalid; unknown characters become
  // U+FFFD, so the round trip is exact when no id is the unknown one.
  std::vector<int32_t> ids;
  try {
    ids = tok->encode(other);
  } catch (const qkv::Error&) {
    if (valid_utf8(other)) std::abort();
    return 0;
  }
  if (!valid_utf8(other)) std::abort();
  bool unknown = false;
  for (int32_t id : ids) {
    if (id < 0 || id > tok->unknown_id()) std::abort();
    unknown = unknown || id == tok->unknown_id();
  }
  const std::string back = tok->decode(ids);
  if (!unknown && back != other) std::abort();
  if (tok->encode(back).size() != ids.size()) std::abort();

  // The saved vocabulary reads back as the same tokenizer.
  const std::string saved = tok->to_json();
  if (qkv::CharTokenizer::from_json(saved, "roundtrip").to_json() != saved) std::abort();
  return 0;
}
