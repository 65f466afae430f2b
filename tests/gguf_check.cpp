// Runs qkv's GGUF reader and weight types from outside, for
// tests/numpy/test_gguf.py, which compares them with the gguf Python
// package. Built with the tests, not installed.
//
//   gguf_check dump FILE
//     prints one JSON object: version, alignment, data_offset, metadata as
//     [key, {"type", "element_type" (arrays), "value"}] pairs in file order
//     (an array of arrays holds such objects), and tensors with name, ggml
//     type, shape (ggml order), offset, nbytes and, for qkv's weight types,
//     "bits": every dequantized float32 as its uint32 bits.
//   gguf_check quantize TYPE IN OUT
//     IN: raw float32; OUT: quantize_row(TYPE) of it (TYPE: a ggml name, Q4_K).
//   gguf_check half IN OUT
//     IN: raw float32; OUT: each as f16 bits (uint16), the quantizers' rounding.
//   gguf_check types
//     prints {"ggml": [[id, name, block, bytes], ...], "weights": [...]}.
// A qkv::Error prints "gguf_check: error: ..." and exits 1.
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "linalg/half.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/weight_type.h"

namespace {

using nlohmann::json;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw qkv::Error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!out) throw qkv::Error("cannot write '" + path + "'");
}

std::vector<float> read_floats(const std::string& path) {
  const std::string bytes = read_all(path);
  std::vector<float> x(bytes.size() / 4);
  std::memcpy(x.data(), bytes.data(), x.size() * 4);
  return x;
}

json value_json(const qkv::GgufValue& v) {
  json out = {{"type", qkv::gguf_type_name(v.type)}};
  if (v.type == qkv::GgufType::array) out["element_type"] = qkv::gguf_type_name(v.element_type);
  const qkv::GgufType scalar = v.type == qkv::GgufType::array ? v.element_type : v.type;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<qkv::GgufValue>>) {
          json items = json::array();
          for (const qkv::GgufValue& e : x) items.push_back(value_json(e));
          out["value"] = items;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          out["value"] = scalar == qkv::GgufType::boolean ? json(x != 0) : json(x);
        } else if constexpr (std::is_same_v<T, std::vector<uint64_t>>) {
          json items = json::array();
          for (const uint64_t e : x) items.push_back(scalar == qkv::GgufType::boolean ? json(e != 0) : json(e));
          out["value"] = items;
        } else {
          out["value"] = x;
        }
      },
      v.data);
  return out;
}

int dump(const std::string& path) {
  const qkv::GgufFile f = qkv::GgufFile::open(path);
  json out = {{"version", f.version()}, {"alignment", f.alignment()}, {"data_offset", f.data_offset()}};
  json meta = json::array();
  for (const auto& [key, v] : f.metadata()) meta.push_back({key, value_json(v)});
  out["metadata"] = meta;
  json tensors = json::array();
  for (const qkv::GgufTensor& t : f.tensors()) {
    json j = {{"name", t.name}, {"type", t.ggml_type}, {"shape", t.shape}, {"offset", t.offset},
              {"nbytes", t.bytes.size()}};
    if (const qkv::WeightTypeInfo* w = qkv::weight_type_from_ggml(t.ggml_type)) {
      const int64_t n = static_cast<int64_t>(t.bytes.size() / w->block_bytes) * w->block;
      std::vector<float> x(static_cast<size_t>(n));
      qkv::dequantize_row(w->type, t.bytes.data(), x.data(), n);
      std::vector<uint32_t> bits(x.size());
      for (size_t i = 0; i < x.size(); ++i) bits[i] = std::bit_cast<uint32_t>(x[i]);
      j["bits"] = bits;
    }
    tensors.push_back(j);
  }
  out["tensors"] = tensors;
  std::puts(out.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

int quantize(const std::string& type, const std::string& in, const std::string& out) {
  const qkv::WeightTypeInfo* w = nullptr;
  for (const qkv::WeightTypeInfo& t : qkv::weight_types())
    if (type == t.name) w = &t;
  if (!w) throw qkv::Error("unknown type '" + type + "'");
  const std::vector<float> x = read_floats(in);
  std::vector<uint8_t> blocks(qkv::weight_bytes(w->type, static_cast<int64_t>(x.size())));
  qkv::quantize_row(w->type, x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  write_all(out, blocks.data(), blocks.size());
  return 0;
}

int half(const std::string& in, const std::string& out) {
  const std::vector<float> x = read_floats(in);
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = qkv::linalg::half_from_float(x[i]);
  write_all(out, h.data(), h.size() * 2);
  return 0;
}

int types() {
  json ggml = json::array(), weights = json::array();
  for (uint32_t id = 0; id < 256; ++id)
    if (const qkv::GgmlTypeLayout* t = qkv::ggml_type_layout(id))
      ggml.push_back({t->id, t->name, t->block, t->block_bytes});
  for (const qkv::WeightTypeInfo& t : qkv::weight_types())
    weights.push_back({static_cast<uint32_t>(t.type), t.name, t.block, t.block_bytes, t.quantize != nullptr});
  std::puts(json({{"ggml", ggml}, {"weights", weights}}).dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 2 && a[0] == "dump") return dump(a[1]);
    if (a.size() == 4 && a[0] == "quantize") return quantize(a[1], a[2], a[3]);
    if (a.size() == 3 && a[0] == "half") return half(a[1], a[2]);
    if (a.size() == 1 && a[0] == "types") return types();
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "gguf_check: error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: gguf_check dump FILE | quantize TYPE IN OUT | half IN OUT | types\n");
  return 2;
}
