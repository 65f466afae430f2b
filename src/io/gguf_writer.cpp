// The GGUF writer (layout in qkv/gguf.h): the header and tensor infos
// serialised in memory, then each tensor's data filled and written in turn
// through one staged file (io/files.h), so that only one tensor's bytes are
// held at a time.
#include <bit>
#include <cstring>
#include <vector>

#include "io/files.h"
#include "io/gguf_kinds.h"
#include "qkv/error.h"
#include "qkv/gguf.h"

namespace qkv {

static_assert(std::endian::native == std::endian::little, "qkv's GGUF writer assumes little-endian");

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// One scalar of type t from the variant's uint64_t, int64_t or double; an
// integer outside t's range is an error, never a value cut to fit.
void put_scalar(std::string& out, GgufType t, uint64_t u, int64_t i, double f) {
  const int bits = t == GgufType::u8 || t == GgufType::i8 ? 8 : t == GgufType::u16 || t == GgufType::i16 ? 16
                   : t == GgufType::u32 || t == GgufType::i32                                      ? 32
                                                                                                   : 64;
  const bool fits = bits == 64 || (io::kind_of(t) == io::Kind::unsigned_int ? u >> bits == 0
                                                                             : i >= -(int64_t{1} << (bits - 1)) &&
                                                                                   i < (int64_t{1} << (bits - 1)));
  if (!fits)
    throw Error(std::string("GGUF writer: ") +
                (io::kind_of(t) == io::Kind::unsigned_int ? std::to_string(u) : std::to_string(i)) + " does not fit " +
                gguf_type_name(t));
  switch (t) {
    case GgufType::u8: put<uint8_t>(out, static_cast<uint8_t>(u)); break;
    case GgufType::boolean: put<uint8_t>(out, u ? 1 : 0); break;
    case GgufType::i8: put<int8_t>(out, static_cast<int8_t>(i)); break;
    case GgufType::u16: put<uint16_t>(out, static_cast<uint16_t>(u)); break;
    case GgufType::i16: put<int16_t>(out, static_cast<int16_t>(i)); break;
    case GgufType::u32: put<uint32_t>(out, static_cast<uint32_t>(u)); break;
    case GgufType::i32: put<int32_t>(out, static_cast<int32_t>(i)); break;
    case GgufType::u64: put<uint64_t>(out, u); break;
    case GgufType::i64: put<int64_t>(out, i); break;
    case GgufType::f32: put<float>(out, static_cast<float>(f)); break;
    case GgufType::f64: put<double>(out, f); break;
    default: throw Error(std::string("GGUF writer: ") + gguf_type_name(t) + " is not a scalar type");
  }
}

// A value as the file holds it: its type, then the value; an array's
// elements follow its element type and count. The variant must hold what
// GgufValue's rule says the type holds (else a qkv::Error naming the key).
void put_value(std::string& out, const GgufValue& v, const std::string& key, bool with_type = true) {
  if (with_type) put<uint32_t>(out, static_cast<uint32_t>(v.type));
  auto wrong = [&] { throw Error("GGUF writer: metadata \"" + key + "\": the value does not hold a " +
                                 gguf_type_name(v.type == GgufType::array ? v.element_type : v.type)); };
  if (v.type == GgufType::string) {
    if (!std::holds_alternative<std::string>(v.data)) wrong();
    return put_string(out, std::get<std::string>(v.data));
  }
  if (v.type != GgufType::array) {
    const io::Kind k = io::kind_of(v.type);
    if (k == io::Kind::real && std::holds_alternative<double>(v.data)) return put_scalar(out, v.type, 0, 0, std::get<double>(v.data));
    if (k == io::Kind::signed_int && std::holds_alternative<int64_t>(v.data)) return put_scalar(out, v.type, 0, std::get<int64_t>(v.data), 0);
    if (k == io::Kind::unsigned_int && std::holds_alternative<uint64_t>(v.data)) return put_scalar(out, v.type, std::get<uint64_t>(v.data), 0, 0);
    wrong();
  }
  put<uint32_t>(out, static_cast<uint32_t>(v.element_type));
  const GgufType e = v.element_type;
  if (e == GgufType::string && std::holds_alternative<std::vector<std::string>>(v.data)) {
    const auto& a = std::get<std::vector<std::string>>(v.data);
    put<uint64_t>(out, a.size());
    for (const std::string& s : a) put_string(out, s);
  } else if (e == GgufType::array && std::holds_alternative<std::vector<GgufValue>>(v.data)) {
    const auto& a = std::get<std::vector<GgufValue>>(v.data);
    put<uint64_t>(out, a.size());
    for (const GgufValue& inner : a) put_value(out, inner, key, false);
  } else if (io::kind_of(e) == io::Kind::real && std::holds_alternative<std::vector<double>>(v.data)) {
    const auto& a = std::get<std::vector<double>>(v.data);
    put<uint64_t>(out, a.size());
    for (const double x : a) put_scalar(out, e, 0, 0, x);
  } else if (io::kind_of(e) == io::Kind::signed_int && std::holds_alternative<std::vector<int64_t>>(v.data)) {
    const auto& a = std::get<std::vector<int64_t>>(v.data);
    put<uint64_t>(out, a.size());
    for (const int64_t x : a) put_scalar(out, e, 0, x, 0);
  } else if (io::kind_of(e) == io::Kind::unsigned_int && std::holds_alternative<std::vector<uint64_t>>(v.data)) {
    const auto& a = std::get<std::vector<uint64_t>>(v.data);
    put<uint64_t>(out, a.size());
    for (const uint64_t x : a) put_scalar(out, e, x, 0, 0);
  } else {
    wrong();
  }
}

uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

GgufValue GgufValue::string(std::string s) { return {GgufType::string, GgufType::u8, std::move(s)}; }
GgufValue GgufValue::u32(uint32_t v) { return {GgufType::u32, GgufType::u8, uint64_t{v}}; }
GgufValue GgufValue::i32(int32_t v) { return {GgufType::i32, GgufType::u8, int64_t{v}}; }
GgufValue GgufValue::f32(float v) { return {GgufType::f32, GgufType::u8, double{v}}; }
GgufValue GgufValue::boolean(bool v) { return {GgufType::boolean, GgufType::u8, uint64_t{v}}; }
GgufValue GgufValue::strings(std::vector<std::string> v) { return {GgufType::array, GgufType::string, std::move(v)}; }
GgufValue GgufValue::i32s(std::vector<int64_t> v) { return {GgufType::array, GgufType::i32, std::move(v)}; }
GgufValue GgufValue::f32s(std::vector<double> v) { return {GgufType::array, GgufType::f32, std::move(v)}; }

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (const auto& [k, v] : metadata_)
    if (k == key) throw Error("GGUF writer: metadata \"" + key + "\" is given twice");
  if (key == "general.alignment") {
    const auto* a = std::get_if<uint64_t>(&value.data);
    if (value.type != GgufType::u32 || !a || *a == 0 || (*a & (*a - 1)) != 0)
      throw Error("GGUF writer: metadata \"general.alignment\" must be a UINT32 power of two");
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, const Shape& ne, uint32_t ggml_type, Fill fill) {
  for (const Tensor& t : tensors_)
    if (t.name == name) throw Error("GGUF writer: tensor " + name + " is given twice");
  const GgmlTypeLayout* layout = ggml_type_layout(ggml_type);
  if (!layout) throw Error("GGUF writer: tensor " + name + ": ggml has no type " + std::to_string(ggml_type));
  if (ne.empty() || ne.size() > 4) throw Error("GGUF writer: tensor " + name + ": expected 1 to 4 dims, found " + shape_str(ne));
  uint64_t n = 1;
  for (const int64_t d : ne) {
    if (d < 1) throw Error("GGUF writer: tensor " + name + ": a dim of " + shape_str(ne) + " is below 1");
    n *= static_cast<uint64_t>(d);
  }
  if (ne[0] % layout->block != 0)
    throw Error("GGUF writer: tensor " + name + " of type " + layout->name + ": rows of " + std::to_string(ne[0]) +
                " values are not a multiple of its block of " + std::to_string(layout->block));
  tensors_.push_back({name, ne, ggml_type, n / static_cast<uint64_t>(layout->block) * layout->block_bytes, std::move(fill)});
}

void GgufWriter::write(const std::string& path) const {
  uint64_t alignment = kDefaultAlignment;
  std::string head;
  head += "GGUF";
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    if (key == "general.alignment") alignment = std::get<uint64_t>(value.data);
    put_string(head, key);
    put_value(head, value, key);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (const int64_t d : t.ne) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, t.type);
    put<uint64_t>(head, offset);
    offset = round_up(offset + t.bytes, alignment);
  }
  head.resize(round_up(head.size(), alignment), '\0');
  FileSet files;
  files.stage_with(path, [&](const FileSet::Sink& sink) {
    sink(head);
    std::vector<std::byte> data;
    for (const Tensor& t : tensors_) {
      data.assign(round_up(t.bytes, alignment), std::byte{0});
      t.fill(data.data());
      sink({reinterpret_cast<const char*>(data.data()), data.size()});
    }
  });
  files.commit();
}

}  // namespace qkv
