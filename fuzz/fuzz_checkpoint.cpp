// fuzz_checkpoint.cpp: libFuzzer target for the checkpoint loaders: the
// safetensors decoder (qkv::parse_safetensors, which reads model.safetensors
// and train_state.safetensors) and the config.json parser
// (qkv::config_from_json).
//
// Every input goes to both: a safetensors file fails the JSON parser at its
// first byte and a JSON config fails the safetensors header-length check, so
// one corpus holding both kinds of file fuzzes both cheaply. Anything other
// than success or qkv::Error is a bug; decoded tensors must survive a write
// and re-read unchanged, and an accepted config must print and re-parse to
// itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qkv/checkpoint.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace {

bool same(const qkv::Tensor& a, const qkv::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

void fuzz_safetensors(const std::string& bytes) {
  std::map<std::string, qkv::Tensor> tensors;
  try {
    tensors = qkv::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const qkv::Error&) {
    return;
  }
  std::vector<std::pair<std::string, const qkv::Tensor*>> named;
  for (const auto& [name, t] : tensors) named.emplace_back(name, &t);
  const auto again = qkv::parse_safetensors(qkv::safetensors_bytes(named), "roundtrip.safetensors");
  if (again.size() != tensors.size()) std::abort();
  for (const auto& [name, t] : tensors) {
    auto it = again.find(name);
    if (it == again.end() || !same(it->second, t)) std::abort();
  }
}

void fuzz_config(const std::string& text) {
  qkv::GPTConfig c;
  try {
    c = qkv::config_from_json(text, "fuzz/config.json");
  } catch (const qkv::Error&) {
    return;
  }
  const qkv::GPTConfig d = qkv::config_from_json(qkv::config_to_json(c), "roundtrip/config.json");
  if (d.vocab != c.vocab || d.context != c.context || d.layers != c.layers || d.heads != c.heads ||
      d.kv_heads != c.kv_heads || d.embd != c.embd || d.rope != c.rope || d.bias != c.bias)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz_safetensors(bytes);
  fuzz_config(bytes);
  return 0;
}
