#include "qkv/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <set>
#include <tuple>

#include <sys/mman.h>
#include <unistd.h>

#include "io/files.h"
#include "io/byte_source.h"
#include "io/json_strict.h"
#include "io/npy_header.h"  // quoted()
#include "io/safetensors_map.h"

namespace qkv {

// Tensors hold native-order bytes and safetensors data is little-endian, so
// both directions are plain copies only on a little-endian host.
static_assert(std::endian::native == std::endian::little, "qkv's safetensors code assumes little-endian");

namespace {

using nlohmann::json;

// The reference reader's cap (safetensors' MAX_HEADER_SIZE); real headers
// are kilobytes, this only stops a corrupt length from costing memory.
constexpr uint64_t kMaxHeaderLen = 100'000'000;
// Root object -> tensor entry -> shape or data_offsets array.
constexpr int kMaxDepth = 3;
constexpr const char* kMetadataKey = "__metadata__";


// One tensor as the header describes it; offsets count from the data start.
// st is the file's dtype name; dtype the Tensor's, for the dtypes a Tensor
// holds (read_safetensors), and f32 for the others a checkpoint reader
// converts (F16, BF16: read_safetensors_as_f32).
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  std::string st;
};

// How the header is read: strictly the dtypes a Tensor holds (read_safetensors),
// or every dtype safetensors defines, by size (a checkpoint's index of tensors).
enum class Dtypes { tensor, any };

// Bytes per element of each safetensors dtype (its format's list), 0 for an unknown name.
size_t st_size(const std::string& s) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1},
      {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes)
    if (s == name) return size;
  return 0;
}

struct Header {
  std::vector<Entry> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start;
};

const char* st_dtype(DType dt) {
  switch (dt) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::boolean: return "BOOL";
    case DType::bf16: return "BF16";  // written as its raw bits; not read back (parse_dtype)
  }
  return "?";
}

std::string u64(uint64_t v) { return std::to_string(v); }

// Thrown inside the header checks; read_header adds the file name.
[[noreturn]] void bad(const std::string& what) { throw Error(what); }

std::string tensor_label(const std::string& name) { return "tensor " + quoted(name, 60); }

DType parse_dtype(const json& j, const std::string& label) {
  if (!j.is_string()) bad(label + ": \"dtype\" must be a string such as \"F32\", found " + json_excerpt(j));
  const std::string s = j.get<std::string>();
  for (DType dt : {DType::f32, DType::f64, DType::boolean})
    if (s == st_dtype(dt)) return dt;
  bad(label + ": dtype " + quoted(s, 20) + " is not supported (qkv reads F32, F64 and BOOL)");
}

Shape parse_shape(const json& j, const std::string& label) {
  const std::string expected = label + ": \"shape\" must be a list of non-negative integers, found ";
  if (!j.is_array()) bad(expected + json_excerpt(j));
  Shape shape;
  for (const json& d : j) {
    // nlohmann keeps integers up to 2^64 - 1 as unsigned; anything larger,
    // negative or fractional is some other kind of number.
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      bad(expected + json_excerpt(j));
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

// Bytes the tensor needs, or an error if that overflows. Multiplied left to
// right as the reference reader does, so [2^40, 2^40, 0] is an overflow too.
uint64_t needed_bytes(const std::string& st, const Shape& shape, const std::string& label) {
  const uint64_t limit = std::numeric_limits<int64_t>::max();
  uint64_t n = st_size(st);
  for (const int64_t d : shape) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > limit / ud)
      bad(label + ": shape " + shape_str(shape) + " of " + st + " overflows: more than 2^63 bytes");
    n *= ud;
  }
  return n;
}

Entry parse_entry(const std::string& name, const json& j, uint64_t data_size, Dtypes dtypes) {
  const std::string label = tensor_label(name);
  if (!j.is_object())
    bad(label + ": expected an object with \"dtype\", \"shape\" and \"data_offsets\", found " + json_excerpt(j));
  for (const auto& [key, value] : j.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad(label + ": unexpected key " + quoted(key, 30) + " (expected \"dtype\", \"shape\", \"data_offsets\")");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) bad(label + ": missing \"" + key + "\"");

  Entry e{name, DType::f32, parse_shape(j["shape"], label), 0, 0, {}};
  if (dtypes == Dtypes::tensor) {
    e.dtype = parse_dtype(j["dtype"], label);
    e.st = st_dtype(e.dtype);
  } else {
    if (!j["dtype"].is_string() || st_size(j["dtype"].get<std::string>()) == 0)
      bad(label + ": \"dtype\" must be a safetensors dtype such as \"F32\", found " +
          json_excerpt(j["dtype"]));
    e.st = j["dtype"].get<std::string>();
  }
  const json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad(label + ": \"data_offsets\" must be [begin, end] with non-negative integers, found " + json_excerpt(off));
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  const std::string offsets = "data_offsets [" + u64(e.begin) + ", " + u64(e.end) + "]";
  if (e.begin > e.end) bad(label + ": " + offsets + " end before they begin");
  if (e.end > data_size)
    bad(label + ": " + offsets + " run past the end of the data, which is " + u64(data_size) +
        " bytes (truncated file?)");
  const uint64_t need = needed_bytes(e.st, e.shape, label);
  if (e.end - e.begin != need)
    bad(label + ": shape " + shape_str(e.shape) + " of " + e.st + " needs " + u64(need) +
        " bytes, " + offsets + " hold " + u64(e.end - e.begin));
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& j) {
  if (!j.is_object()) bad("\"__metadata__\" must be an object of strings, found " + json_excerpt(j));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string())
      bad("\"__metadata__\": value of " + quoted(key, 30) + " must be a string, found " + json_excerpt(value));
    out[key] = value.get<std::string>();
  }
  return out;
}

// The tensors must tile the data exactly: sorted by offset, each begins where
// the previous one ended, and the last ends at the end of the file. So no two
// overlap, no byte is unaccounted for, and nothing trails.
void check_tiling(std::vector<Entry>& tensors, uint64_t data_size) {
  std::sort(tensors.begin(), tensors.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : tensors) {
    if (e.begin < pos)
      bad(tensor_label(e.name) + " [" + u64(e.begin) + ", " + u64(e.end) + ") overlaps " +
          tensor_label(prev->name) + " [" + u64(prev->begin) + ", " + u64(prev->end) + ")");
    if (e.begin > pos)
      bad("bytes [" + u64(pos) + ", " + u64(e.begin) + ") of the data belong to no tensor (" +
          (prev ? "between " + tensor_label(prev->name) + " and " : std::string("before ")) +
          tensor_label(e.name) + "); tensors must be contiguous");
    pos = e.end;
    prev = &e;
  }
  if (pos != data_size)
    bad("the tensors cover " + u64(pos) + " bytes of data, the file holds " + u64(data_size) + ": " +
        u64(data_size - pos) + " trailing bytes belong to no tensor");
}

Header read_header(const ByteSource& src, const std::string& name, Dtypes dtypes = Dtypes::tensor) {
  const std::string pre = "'" + name + "': ";
  if (src.size == 0) throw Error(pre + "not a safetensors file: it is empty");
  if (src.size < 8)
    throw Error(pre + "truncated safetensors file: " + u64(src.size) +
                " bytes, the header length alone needs 8");
  unsigned char len_bytes[8];
  src.read(0, 8, reinterpret_cast<std::byte*>(len_bytes));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | len_bytes[i];
  if (header_len > kMaxHeaderLen)
    throw Error(pre + "safetensors header length " + u64(header_len) + " exceeds the limit of " +
                u64(kMaxHeaderLen) + " bytes (not a safetensors file?)");
  if (header_len > src.size - 8)
    throw Error(pre + "safetensors header length " + u64(header_len) + " runs past the end of the file (" +
                u64(src.size - 8) + " bytes after the length field)");
  std::string text(static_cast<size_t>(header_len), '\0');
  src.read(8, text.size(), reinterpret_cast<std::byte*>(text.data()));
  if (text.empty() || text[0] != '{')
    throw Error(pre + "safetensors header must be a JSON object starting with '{', found " +
                (text.empty() ? std::string("an empty header") : quoted(text, 12)));

  Header h{{}, {}, 8 + header_len};
  const uint64_t data_size = src.size - h.data_start;
  try {
    const json j = parse_json_strict(text, kMaxDepth);
    for (const auto& [key, value] : j.items()) {
      if (key == kMetadataKey)
        h.metadata = parse_metadata(value);
      else
        h.tensors.push_back(parse_entry(key, value, data_size, dtypes));
    }
    check_tiling(h.tensors, data_size);
  } catch (const Error& e) {
    throw Error(pre + "bad safetensors header: " + e.what());
  }
  return h;
}

std::map<std::string, Tensor> decode(const ByteSource& src, const std::string& name) {
  const Header h = read_header(src, name);
  std::map<std::string, Tensor> out;
  for (const Entry& e : h.tensors) {
    Tensor t(e.dtype, e.shape);
    src.read(h.data_start + e.begin, t.nbytes(), t.raw());
    if (e.dtype == DType::boolean) {
      const auto* b = reinterpret_cast<const unsigned char*>(t.raw());
      for (int64_t i = 0; i < t.numel(); ++i)
        if (b[i] > 1)
          throw Error("'" + name + "': " + tensor_label(e.name) + ": BOOL element " + std::to_string(i) +
                      " is byte " + std::to_string(b[i]) + ", expected 0 or 1");
    }
    out.emplace(e.name, std::move(t));
  }
  return out;
}


// The length field and the padded JSON header for `tensors` laid out in order.
std::string header_bytes(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order: "__metadata__" first, then the
  // tensors in file order, each with dtype, shape, data_offsets.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h[kMetadataKey] = std::move(m);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (t == nullptr) throw Error("write_safetensors: tensor " + quoted(name, 60) + " is a null pointer");
    if (name == kMetadataKey)
      throw Error("write_safetensors: \"__metadata__\" is reserved and cannot name a tensor");
    if (!names.insert(name).second)
      throw Error("write_safetensors: tensor name " + quoted(name, 60) + " appears twice");
    const uint64_t end = offset + t->nbytes();
    h[name] = {{"dtype", st_dtype(t->dtype())}, {"shape", t->shape()}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const nlohmann::json::exception&) {
    // The only way dump() fails: a string that is not valid UTF-8.
    throw Error("write_safetensors: a tensor name or metadata string is not valid UTF-8");
  }
  // Padded with spaces so the data starts at a multiple of 8 bytes, as the
  // reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

std::string data_bytes(const std::vector<std::pair<std::string, const Tensor*>>& tensors) {
  size_t total = 0;
  for (const auto& [name, t] : tensors) total += t->nbytes();
  std::string out;
  out.reserve(total);
  for (const auto& [name, t] : tensors) out.append(reinterpret_cast<const char*>(t->raw()), t->nbytes());
  return out;
}

}  // namespace

std::string safetensors_bytes(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  return header_bytes(tensors, metadata) + data_bytes(tensors);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = header_bytes(tensors, metadata);
  write_file_atomic(path, {header, data_bytes(tensors)});
}

void stage_safetensors(FileSet& files, const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = header_bytes(tensors, metadata);
  files.stage(path, {header, data_bytes(tensors)});
}

std::map<std::string, Tensor> parse_safetensors(const std::string& bytes, const std::string& name_for_errors) {
  const ByteSource src = memory_source(bytes);
  return decode(src, name_for_errors);
}

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  std::map<std::string, Tensor> out;
  with_file_source(path, [&](const ByteSource& src) { out = decode(src, path); });
  return out;
}

std::vector<SafetensorsEntry> safetensors_entries(const std::string& path) {
  std::vector<SafetensorsEntry> out;
  with_file_source(path, [&](const ByteSource& src) {
    for (const Entry& e : read_header(src, path, Dtypes::any).tensors) out.push_back({e.name, e.st, e.shape});
  });
  return out;
}

namespace {

// n bytes at `at` into dst, in pieces split between the threads: a large
// checkpoint's copy out of the page cache, and the faults of the fresh
// memory it lands in, go at the speed of every core, not one.
void read_in_parallel(const ByteSource& src, uint64_t at, uint64_t n, std::byte* dst) {
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
  if (pieces <= 1) return src.read(at, static_cast<size_t>(n), dst);
  std::exception_ptr failed;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const uint64_t off = static_cast<uint64_t>(p) * kPiece, len = std::min(kPiece, n - off);
    try {
      src.read(at + off, static_cast<size_t>(len), dst + off);
    } catch (...) {
#pragma omp critical
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

void read_safetensors_as_f32(const std::string& path,
                             const std::function<float*(const SafetensorsEntry&)>& dst_for) {
  read_safetensors_into(path, [&](const SafetensorsEntry& e) { return SafetensorsTarget{dst_for(e), nullptr}; });
}

void read_safetensors_into(const std::string& path,
                           const std::function<SafetensorsTarget(const SafetensorsEntry&)>& target_for) {
  with_file_source(path, [&](const ByteSource& src) {
    const Header h = read_header(src, path, Dtypes::any);
    // Half-width dtypes go through one chunk buffer, widened as they come.
    constexpr size_t kChunk = 1 << 16;
    std::vector<uint16_t> half;
    for (const Entry& e : h.tensors) {
      const SafetensorsTarget target = target_for({e.name, e.st, e.shape});
      float* dst = target.f32;
      const uint64_t n = (e.end - e.begin) / st_size(e.st);
      const uint64_t at = h.data_start + e.begin;
      if (target.bf16) {
        if (e.st != "BF16")
          throw Error("'" + path + "': " + tensor_label(e.name) + " is " + e.st + ", not BF16");
        read_in_parallel(src, at, n * 2, reinterpret_cast<std::byte*>(target.bf16));
        continue;
      }
      if (!dst) continue;
      if (e.st == "F32") {
        read_in_parallel(src, at, n * 4, reinterpret_cast<std::byte*>(dst));
      } else if (e.st == "F16" || e.st == "BF16") {
        half.resize(kChunk);
        const bool bf = e.st == "BF16";
        for (uint64_t i = 0; i < n; i += kChunk) {
          const size_t m = static_cast<size_t>(std::min<uint64_t>(kChunk, n - i));
          src.read(at + i * 2, m * 2, reinterpret_cast<std::byte*>(half.data()));
          for (size_t j = 0; j < m; ++j)
            dst[i + j] = bf ? bf16_to_float(bfloat16{half[j]}) : float_from_half(half[j]);
        }
      } else {
        throw Error("'" + path + "': " + tensor_label(e.name) + " is " + e.st +
                    "; a model's weights must be F32, F16 or BF16");
      }
    }
  });
}

float float_from_half(uint16_t h) {
  // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, frac = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | frac << 13);  // inf, NaN
  if (exp == 0) {
    // Zero or subnormal: frac * 2^-24, exact in float32.
    const float v = static_cast<float>(frac) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | (exp + 112) << 23 | frac << 13);
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::map<std::string, std::string> meta;
  with_file_source(path, [&](const ByteSource& src) { meta = read_header(src, path).metadata; });
  return meta;
}

SafetensorsMapping::SafetensorsMapping(const std::string& path, bool populate) : file_(path) {
  const Header h = read_header(memory_source(file_.data(), file_.size()), path, Dtypes::any);
  for (const Entry& e : h.tensors) {
    entries_.push_back({e.name, e.st, e.shape});
    span_[e.name] = {h.data_start + e.begin, e.end - e.begin};
  }
  // After the mapping's huge-page advice, so that what it reads in is read
  // in large folios.
  if (populate) file_.populate();
}

SafetensorsMapping::~SafetensorsMapping() = default;

void SafetensorsMapping::release(const std::string& name) const {
  const auto it = span_.find(name);
  if (it == span_.end()) return;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lo = it->second.offset / page * page;
  const uint64_t hi = std::min<uint64_t>(file_.size(), it->second.offset + it->second.bytes);
  // Advice: no error to report.
  if (hi > lo) madvise(const_cast<std::byte*>(file_.data()) + lo, hi - lo, MADV_DONTNEED);
}

void SafetensorsMapping::release_pages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // advice: no error to report
}

const std::byte* SafetensorsMapping::data(const std::string& name) const {
  const auto it = span_.find(name);
  return it == span_.end() ? nullptr : file_.data() + it->second.offset;
}

}  // namespace qkv
