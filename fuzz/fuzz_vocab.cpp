// fuzz_vocab.cpp: libFuzzer target for the vocabulary loader
// (qkv::CharTokenizer::from_json, which reads a checkpoint's vocab.json).
//
// Anything other than success or qkv::Error is a bug. An accepted vocabulary
// must print (to_json) and re-read to itself, and every id must decode to
// valid UTF-8 that encodes back to the same ids.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  std::optional<qkv::CharTokenizer> tok;
  try {
    tok.emplace(qkv::CharTokenizer::from_json(json, "fuzz/vocab.json"));
  } catch (const qkv::Error&) {
    return 0;  // refused: expected
  }
  // Accepted: from here on any qkv::Error is a bug too (it escapes and crashes).
  const std::string saved = tok->to_json();
  const qkv::CharTokenizer again = qkv::CharTokenizer::from_json(saved, "roundtrip/vocab.json");
  if (again.vocab_size() != tok->vocab_size() || again.to_json() != saved) std::abort();
  // Every id decodes to valid UTF-8, and the known ones encode back to themselves.
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < tok->vocab_size(); ++i) ids.push_back(i);
  std::vector<int32_t> back = tok->encode(tok->decode(ids));
  if (back.size() != ids.size()) std::abort();
  back.back() = tok->unknown_id();  // U+FFFD may itself be in the vocabulary
  if (back != ids) std::abort();
  return 0;
}
