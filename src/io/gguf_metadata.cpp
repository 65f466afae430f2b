// GgufFile's lookups: metadata by key, with typed reads, and tensors by name.
#include <limits>

#include "io/npy_header.h"  // quoted()
#include "qkv/error.h"
#include "qkv/gguf.h"

namespace qkv {
namespace {

bool is_integer(GgufType t) {
  return t != GgufType::f32 && t != GgufType::f64 && t != GgufType::string && t != GgufType::array &&
         t != GgufType::boolean;
}

constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// "ARRAY of UINT8", or the type's name.
std::string type_str(const GgufValue& v) {
  if (v.type != GgufType::array) return gguf_type_name(v.type);
  return std::string("ARRAY of ") + gguf_type_name(v.element_type);
}

}  // namespace

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::wrong_type(const std::string& key, const char* expected, const GgufValue& v) const {
  throw Error("'" + name_ + "': metadata " + quoted(key, 60) + ": expected " + expected + ", found " + type_str(v));
}

// The value of `key`; a missing key is an error saying what was `expected`.
const GgufValue& GgufFile::value_of(const std::string& key, const char* expected) const {
  const GgufValue* v = find(key);
  if (!v)
    throw Error("'" + name_ + "': metadata " + quoted(key, 60) + ": expected " + expected + ", found no such key");
  return *v;
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const char* expected = "STRING";
  const GgufValue& v = value_of(key, expected);
  if (v.type != GgufType::string) wrong_type(key, expected, v);
  return std::get<std::string>(v.data);
}

int64_t GgufFile::get_int(const std::string& key) const {
  const char* expected = "an integer (UINT8 to INT64)";
  const GgufValue& v = value_of(key, expected);
  if (!is_integer(v.type)) wrong_type(key, expected, v);
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  const uint64_t u = std::get<uint64_t>(v.data);
  if (u > kMaxInt64)
    throw Error("'" + name_ + "': metadata " + quoted(key, 60) + ": expected a value below 2^63, found " +
                std::to_string(u));
  return static_cast<int64_t>(u);
}

double GgufFile::get_float(const std::string& key) const {
  const char* expected = "FLOAT32 or FLOAT64";
  const GgufValue& v = value_of(key, expected);
  if (v.type != GgufType::f32 && v.type != GgufType::f64) wrong_type(key, expected, v);
  return std::get<double>(v.data);
}

bool GgufFile::get_bool(const std::string& key) const {
  const char* expected = "BOOL";
  const GgufValue& v = value_of(key, expected);
  if (v.type != GgufType::boolean) wrong_type(key, expected, v);
  return std::get<uint64_t>(v.data) != 0;
}

const std::vector<std::string>& GgufFile::get_strings(const std::string& key) const {
  const char* expected = "ARRAY of STRING";
  const GgufValue& v = value_of(key, expected);
  if (v.type != GgufType::array || v.element_type != GgufType::string) wrong_type(key, expected, v);
  return std::get<std::vector<std::string>>(v.data);
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  const char* expected = "ARRAY of an integer type";
  const GgufValue& v = value_of(key, expected);
  if (v.type != GgufType::array || !is_integer(v.element_type)) wrong_type(key, expected, v);
  if (const auto* s = std::get_if<std::vector<int64_t>>(&v.data)) return *s;
  const auto& u = std::get<std::vector<uint64_t>>(v.data);
  std::vector<int64_t> out(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    if (u[i] > kMaxInt64)
      throw Error("'" + name_ + "': metadata " + quoted(key, 60) + ": element " + std::to_string(i) +
                  ": expected a value below 2^63, found " + std::to_string(u[i]));
    out[i] = static_cast<int64_t>(u[i]);
  }
  return out;
}

const std::vector<double>& GgufFile::get_floats(const std::string& key) const {
  const char* expected = "ARRAY of FLOAT32 or FLOAT64";
  const GgufValue& v = value_of(key, expected);
  if (v.type != GgufType::array || (v.element_type != GgufType::f32 && v.element_type != GgufType::f64))
    wrong_type(key, expected, v);
  return std::get<std::vector<double>>(v.data);
}

}  // namespace qkv
