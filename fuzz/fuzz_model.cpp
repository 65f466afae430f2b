// fuzz_model.cpp: libFuzzer target for a whole model directory, the way
// `qkv sample` reads it: config.json, vocab.json and model.safetensors
// together through qkv::load_model, so that the checks between the files
// (the vocabulary's size against the config, the config's tensors against
// the weights, the config's size against the weights file's) are fuzzed
// too, not only each parser alone.
//
// Input: a 2-byte little-endian length and config.json, a 2-byte length and
// vocab.json, then model.safetensors (the rest). The three files are written
// into one temporary directory per process and loaded. Anything other than
// success or qkv::Error is a bug, and so is an allocation beyond the fuzzer's
// memory limit: a config must not make load_model allocate more than its
// weights file could hold. An accepted model has exactly its config's
// parameters, all finite.
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "qkv/checkpoint.h"
#include "qkv/error.h"
#include "qkv/gpt.h"

namespace {

std::string g_dir;

void put(const std::string& name, const uint8_t* data, size_t size) {
  std::ofstream out(g_dir + "/" + name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// The next 2-byte-length-prefixed piece of [data, data + size), or the rest.
size_t piece(const uint8_t*& data, size_t& size) {
  if (size < 2) return 0;
  const size_t n = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
  data += 2, size -= 2;
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char tmpl[] = "/tmp/qkv-fuzz-model.XXXXXX";
  if (!mkdtemp(tmpl)) std::abort();
  g_dir = tmpl;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t config_len = piece(data, size);
  put("config.json", data, config_len);
  data += config_len, size -= config_len;
  const size_t vocab_len = piece(data, size);
  put("vocab.json", data, vocab_len);
  data += vocab_len, size -= vocab_len;
  put("model.safetensors", data, size);
  std::optional<qkv::LoadedModel> loaded;
  try {
    loaded = qkv::load_model(g_dir);
  } catch (const qkv::Error&) {
    return 0;
  }
  const qkv::LoadedModel& m = *loaded;
  const qkv::GPT model(m.config);
  if (static_cast<int64_t>(m.weights.size()) != model.num_params()) std::abort();
  if (m.tokenizer.vocab_size() != m.config.vocab) std::abort();
  for (float w : m.weights)
    if (!std::isfinite(w)) std::abort();
  return 0;
}
