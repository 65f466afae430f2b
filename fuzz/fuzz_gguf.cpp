// fuzz_gguf.cpp: libFuzzer target for the GGUF reader (qkv::GgufFile::parse)
// and the reference dequantizers of the weight types.
//
// Anything other than success or qkv::Error is a bug. An accepted file must
// describe itself consistently: every tensor's bytes lie inside the input,
// where its offset says, the typed metadata reads either answer or refuse
// with qkv::Error, and every tensor of a type qkv computes with dequantizes,
// row by row, without a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/weight_type.h"

namespace {

// Each typed read of `key`: an answer or a qkv::Error, nothing else.
void read_every_way(const qkv::GgufFile& f, const std::string& key) {
  const auto attempt = [](auto read) {
    try {
      read();
    } catch (const qkv::Error&) {
    }
  };
  attempt([&] { f.get_string(key); });
  attempt([&] { f.get_int(key); });
  attempt([&] { f.get_float(key); });
  attempt([&] { f.get_bool(key); });
  attempt([&] { f.get_strings(key); });
  attempt([&] { f.get_ints(key); });
  attempt([&] { f.get_floats(key); });
}

// The tensor's rows (ne[0] weights each) dequantized one by one. (A tensor
// with no bytes may still claim a long row, [2^40, 0]: nothing to do.)
void dequantize(const qkv::GgufTensor& t, const qkv::WeightTypeInfo& w) {
  const int64_t row = t.shape.empty() ? 1 : t.shape[0];
  if (t.bytes.empty()) return;
  const uint64_t row_bytes = qkv::weight_bytes(w.type, row);
  if (t.bytes.size() % row_bytes != 0) std::abort();
  std::vector<float> out(static_cast<size_t>(row));
  for (uint64_t at = 0; at < t.bytes.size(); at += row_bytes)
    qkv::dequantize_row(w.type, t.bytes.data() + at, out.data(), row);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<qkv::GgufFile> f;
  try {
    f.emplace(qkv::GgufFile::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf"));
  } catch (const qkv::Error&) {
    return 0;
  }
  if (f->data_offset() % f->alignment() != 0) std::abort();
  for (const qkv::GgufTensor& t : f->tensors()) {
    const uint64_t at = f->data_offset() + t.offset;
    if (t.offset % f->alignment() != 0 || at > size || t.bytes.size() > size - at) std::abort();
    if (!t.bytes.empty() && std::memcmp(t.bytes.data(), data + at, t.bytes.size()) != 0) std::abort();
    if (f->find_tensor(t.name) != &t) std::abort();
    if (const qkv::WeightTypeInfo* w = qkv::weight_type_from_ggml(t.ggml_type)) dequantize(t, *w);
  }
  for (const auto& [key, value] : f->metadata()) {
    if (f->find(key) != &value) std::abort();
    read_every_way(*f, key);
  }
  return 0;
}
