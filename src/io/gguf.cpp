// The GGUF parser: header, metadata, tensor infos, data section (layout in
// qkv/gguf.h). One pass front to back over bytes already in memory (a
// mapped file or a copy), every read bounded by what is left.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <span>

#include <sys/mman.h>
#include <unistd.h>

#include "io/gguf_kinds.h"
#include "io/mapped_file.h"
#include "io/npy_header.h"  // quoted()
#include "qkv/error.h"
#include "qkv/gguf.h"

namespace qkv {

// Numbers are read with memcpy: the file is little-endian.
static_assert(std::endian::native == std::endian::little, "qkv's GGUF reader assumes little-endian");

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
// Arrays of arrays deeper than this are refused (the stack is bounded too).
constexpr int kMaxNesting = 8;
// The fewest bytes a metadata entry takes (an empty key, its type, a one-byte
// value) and a tensor info (an empty name, n_dims, no dims, type, offset).
constexpr uint64_t kMinEntry = 8 + 4 + 1, kMinTensorInfo = 8 + 4 + 4 + 8;
constexpr uint64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

std::string u64s(uint64_t v) { return std::to_string(v); }

// Reads the bytes front to back. Each read checks that its bytes are there;
// `field` says what is being read, for messages:
//   'FILE': FIELD: expected ..., found ...
class Reader {
 public:
  Reader(const std::byte* data, uint64_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

  std::string field;

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void fail(const std::string& what) const { throw Error("'" + file_ + "': " + field + ": " + what); }

  // A little-endian T; `item` names it in the message of a truncated file.
  template <class T>
  T num(const char* item) {
    need(sizeof(T), item);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A u64 byte count and that many bytes.
  std::string str(const char* item) {
    const uint64_t n = num<uint64_t>(item);
    if (n > left())
      fail("expected " + std::string(item) + " of " + u64s(n) + " bytes at byte " + u64s(pos_) +
           ", found the file ending after " + u64s(left()) + " (truncated file?)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  void need(uint64_t n, const char* item) const {
    if (n > left())
      fail("expected " + std::string(item) + " (" + u64s(n) + " bytes) at byte " + u64s(pos_) +
           ", found the file ending after " + u64s(left()) + " (truncated file?)");
  }

  const std::byte* data_;
  uint64_t size_, pos_ = 0;
  const std::string& file_;
};

using io::Kind;
using io::kind_of;

// The fewest bytes one value of type t takes in the file.
uint64_t min_bytes(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: case GgufType::string: return 8;
    case GgufType::array: break;
  }
  return 4 + 8;  // an array: its element type and count
}

// A value type read from the file; `item` names it ("a value type").
GgufType read_type(Reader& r, const char* item) {
  const uint32_t t = r.num<uint32_t>(item);
  if (t > static_cast<uint32_t>(GgufType::f64))
    r.fail("expected " + std::string(item) + " from 0 (UINT8) to 12 (FLOAT64), found " + u64s(t));
  return static_cast<GgufType>(t);
}

uint64_t read_unsigned(Reader& r, GgufType t) {
  switch (t) {
    case GgufType::u8: return r.num<uint8_t>("a UINT8");
    case GgufType::u16: return r.num<uint16_t>("a UINT16");
    case GgufType::u32: return r.num<uint32_t>("a UINT32");
    case GgufType::u64: return r.num<uint64_t>("a UINT64");
    default: break;
  }
  const uint8_t b = r.num<uint8_t>("a BOOL");
  if (b > 1) r.fail("expected a BOOL of 0 or 1, found " + u64s(b));
  return b;
}

int64_t read_signed(Reader& r, GgufType t) {
  switch (t) {
    case GgufType::i8: return r.num<int8_t>("an INT8");
    case GgufType::i16: return r.num<int16_t>("an INT16");
    case GgufType::i32: return r.num<int32_t>("an INT32");
    default: break;
  }
  return r.num<int64_t>("an INT64");
}

double read_real(Reader& r, GgufType t) {
  if (t == GgufType::f32) return r.num<float>("a FLOAT32");
  return r.num<double>("a FLOAT64");
}

// Room reserved up front for n items: n is bounded by the bytes left in the
// file, but an item in memory can be several times its bytes in the file
// (a UINT8 element becomes a 64-bit value, a string a std::string), so a
// hostile count in a large file reserves at most this many and the vector
// grows as the items really come.
constexpr uint64_t kMaxReserve = 1 << 16;

// n values of one kind, read by `one`.
template <class T, class F>
std::vector<T> read_many(uint64_t n, F one) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(std::min(n, kMaxReserve)));
  for (uint64_t i = 0; i < n; ++i) out.push_back(one());
  return out;
}

// A value of type t; `depth` arrays enclose it.
GgufValue read_value(Reader& r, GgufType t, int depth) {
  GgufValue v;
  v.type = t;
  switch (kind_of(t)) {
    case Kind::unsigned_int: v.data = read_unsigned(r, t); return v;
    case Kind::signed_int: v.data = read_signed(r, t); return v;
    case Kind::real: v.data = read_real(r, t); return v;
    case Kind::text: v.data = r.str("a string"); return v;
    case Kind::array: break;
  }
  const GgufType et = read_type(r, "an array element type");
  if (et == GgufType::array && depth + 1 >= kMaxNesting)
    r.fail("expected arrays nested at most " + std::to_string(kMaxNesting) + " deep, found deeper");
  const uint64_t n = r.num<uint64_t>("an array length");
  // Checked before anything is allocated: each element takes bytes of the file.
  if (n > r.left() / min_bytes(et))
    r.fail("expected an array length that fits the file, found " + u64s(n) + " elements of " +
           gguf_type_name(et) + " (at least " + u64s(min_bytes(et)) + " bytes each) with " +
           u64s(r.left()) + " bytes left (truncated file?)");
  v.element_type = et;
  switch (kind_of(et)) {
    case Kind::unsigned_int: v.data = read_many<uint64_t>(n, [&] { return read_unsigned(r, et); }); break;
    case Kind::signed_int: v.data = read_many<int64_t>(n, [&] { return read_signed(r, et); }); break;
    case Kind::real: v.data = read_many<double>(n, [&] { return read_real(r, et); }); break;
    case Kind::text: v.data = read_many<std::string>(n, [&] { return r.str("a string"); }); break;
    case Kind::array:
      v.data = read_many<GgufValue>(n, [&] { return read_value(r, GgufType::array, depth + 1); });
      break;
  }
  return v;
}

// Magic and version; a big-endian file or version 1 is refused by name.
uint32_t read_version(Reader& r) {
  r.field = "magic";
  if (r.left() < 4)
    r.fail("expected \"GGUF\", found the file ending after " + u64s(r.left()) + " bytes (not a GGUF file?)");
  const uint32_t magic = r.num<uint32_t>("the magic");
  if (magic != 0x46554747u) {  // "GGUF" read as a little-endian u32
    const char bytes[4] = {char(magic), char(magic >> 8), char(magic >> 16), char(magic >> 24)};
    r.fail("expected \"GGUF\", found " + quoted(std::string_view(bytes, 4), 4) + " (not a GGUF file)");
  }
  r.field = "version";
  const uint32_t version = r.num<uint32_t>("the version");
  const uint32_t swapped = __builtin_bswap32(version);
  if ((version & 0xffffu) == 0 && swapped >= 1 && swapped <= 3)
    r.fail("expected a little-endian file, found a big-endian one (version " + u64s(swapped) +
           " written byte-swapped); qkv reads little-endian GGUF only");
  if (version == 1)
    r.fail("expected version 2 or 3, found 1 (the first GGUF version, 32-bit counts; convert the file again)");
  if (version != 2 && version != 3) r.fail("expected version 2 or 3, found " + u64s(version));
  return version;
}

// general.alignment: a UINT32, a power of two (the default when absent).
uint64_t alignment_of(Reader& r, const std::vector<std::pair<std::string, GgufValue>>& metadata) {
  for (const auto& [key, v] : metadata) {
    if (key != "general.alignment") continue;
    r.field = "metadata \"general.alignment\"";
    if (v.type != GgufType::u32) r.fail(std::string("expected UINT32, found ") + gguf_type_name(v.type));
    const uint64_t a = std::get<uint64_t>(v.data);
    if (!std::has_single_bit(a)) r.fail("expected a power of two, found " + u64s(a));
    return a;
  }
  return kDefaultAlignment;
}

// Bytes of a tensor of type `t` and `shape` (ggml order), or an error: the
// element count and the byte size must fit int64_t, and ne[0] must fill
// whole blocks.
uint64_t tensor_bytes(Reader& r, const GgmlTypeLayout& t, const Shape& shape) {
  uint64_t numel = 1;
  for (const int64_t d : shape) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && numel > kMaxInt64 / ud)
      r.fail("expected a shape of fewer than 2^63 elements, found " + shape_str(shape));
    numel *= ud;
  }
  const int64_t ne0 = shape.empty() ? 1 : shape[0];
  if (ne0 % t.block != 0)
    r.fail("expected ne[0] (the row length) to be a multiple of " + std::to_string(t.block) + " for " + t.name +
           ", found shape " + shape_str(shape));
  const uint64_t blocks = numel / static_cast<uint64_t>(t.block);
  if (blocks > kMaxInt64 / t.block_bytes)
    r.fail("expected fewer than 2^63 bytes, found shape " + shape_str(shape) + " of " + t.name);
  return blocks * t.block_bytes;
}

// The tensor and metadata counts, each checked against the bytes left (an
// entry or a tensor info takes at least kMinEntry or kMinTensorInfo bytes).
std::pair<uint64_t, uint64_t> read_counts(Reader& r) {
  r.field = "tensor count";
  const uint64_t n_tensors = r.num<uint64_t>("the tensor count");
  r.field = "metadata count";
  const uint64_t n_kv = r.num<uint64_t>("the metadata count");
  if (n_tensors > r.left() / kMinTensorInfo || n_kv > (r.left() - n_tensors * kMinTensorInfo) / kMinEntry) {
    r.field = "counts";
    r.fail("expected counts that fit the file, found " + u64s(n_tensors) + " tensors and " + u64s(n_kv) +
           " metadata entries in " + u64s(r.left()) + " bytes (truncated file?)");
  }
  return {n_tensors, n_kv};
}

// n metadata entries into `entries` (file order) and `index` (key -> position).
void read_metadata(Reader& r, uint64_t n, std::vector<std::pair<std::string, GgufValue>>& entries,
                   std::map<std::string, size_t>& index) {
  entries.reserve(static_cast<size_t>(std::min(n, kMaxReserve)));
  for (uint64_t i = 0; i < n; ++i) {
    r.field = "metadata entry " + u64s(i);
    std::string key = r.str("a key");
    r.field = "metadata " + quoted(key, 60);
    if (index.count(key)) r.fail("expected each key once, found it twice");
    const GgufType t = read_type(r, "a value type");
    index.emplace(key, entries.size());
    entries.emplace_back(std::move(key), read_value(r, t, 0));
  }
}

// n tensor infos (name, dims, type, offset; no bytes yet) into `tensors`
// and `index` (name -> position).
void read_tensor_infos(Reader& r, uint64_t n, std::vector<GgufTensor>& tensors, std::map<std::string, size_t>& index) {
  tensors.reserve(static_cast<size_t>(std::min(n, kMaxReserve)));
  for (uint64_t i = 0; i < n; ++i) {
    r.field = "tensor info " + u64s(i);
    GgufTensor t;
    t.name = r.str("a name");
    r.field = "tensor " + quoted(t.name, 60);
    if (index.count(t.name)) r.fail("expected each tensor name once, found it twice");
    const uint32_t n_dims = r.num<uint32_t>("n_dims");
    if (n_dims > kMaxDims) r.fail("expected at most 4 dims, found n_dims " + u64s(n_dims));
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.num<uint64_t>("a dim");
      if (ne > kMaxInt64) r.fail("expected dims below 2^63, found " + u64s(ne));
      t.shape.push_back(static_cast<int64_t>(ne));
    }
    t.ggml_type = r.num<uint32_t>("a ggml type");
    if (!ggml_type_layout(t.ggml_type))
      r.fail("expected a ggml tensor type, found unknown type id " + u64s(t.ggml_type));
    t.offset = r.num<uint64_t>("an offset");
    index.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
  }
}

// Each tensor's bytes: its size from its type and shape, at data_offset + its
// offset (a multiple of the alignment), inside the `size` bytes at `data`.
void place_tensors(Reader& r, std::vector<GgufTensor>& tensors, const std::byte* data, uint64_t size,
                   uint64_t data_offset, uint64_t alignment) {
  const uint64_t room = data_offset <= size ? size - data_offset : 0;
  for (GgufTensor& t : tensors) {
    r.field = "tensor " + quoted(t.name, 60);
    const uint64_t bytes = tensor_bytes(r, *ggml_type_layout(t.ggml_type), t.shape);
    if (t.offset % alignment != 0)
      r.fail("expected an offset that is a multiple of the alignment " + u64s(alignment) + ", found " +
             u64s(t.offset));
    if (data_offset > size || t.offset > room || bytes > room - t.offset)
      r.fail("expected its " + u64s(bytes) + " bytes at offset " + u64s(t.offset) + " inside the " + u64s(room) +
             " bytes of data, found them past the end of the file (truncated file?)");
    t.bytes = {data + data_offset + t.offset, static_cast<size_t>(bytes)};
  }
}

// No two tensors share a byte: in order of offset, each begins where every
// earlier one has ended (tensors without bytes share none).
void check_apart(Reader& r, const std::vector<GgufTensor>& tensors) {
  std::vector<const GgufTensor*> order;
  for (const GgufTensor& t : tensors)
    if (!t.bytes.empty()) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  auto end_of = [](const GgufTensor& t) { return t.offset + t.bytes.size(); };
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor &prev = *order[k - 1], &t = *order[k];
    if (t.offset >= end_of(prev)) continue;
    r.field = "tensor " + quoted(t.name, 60);
    r.fail("expected data apart from every other tensor's, found bytes [" + u64s(t.offset) + ", " + u64s(end_of(t)) +
           ") overlapping tensor " + quoted(prev.name, 60) + "'s [" + u64s(prev.offset) + ", " + u64s(end_of(prev)) +
           ")");
  }
}

}  // namespace

// The whole file, front to back: header, metadata, tensor infos, then the
// data section at the next multiple of the alignment.
GgufFile GgufFile::from(std::shared_ptr<const void> keep, const std::byte* data, uint64_t size,
                        const std::string& name) {
  GgufFile f;
  f.keep_ = std::move(keep);
  f.name_ = name;
  Reader r(data, size, f.name_);
  f.version_ = read_version(r);
  const auto [n_tensors, n_kv] = read_counts(r);
  read_metadata(r, n_kv, f.metadata_, f.key_index_);
  f.alignment_ = alignment_of(r, f.metadata_);
  read_tensor_infos(r, n_tensors, f.tensors_, f.tensor_index_);
  f.data_offset_ = (r.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  place_tensors(r, f.tensors_, data, size, f.data_offset_, f.alignment_);
  check_apart(r, f.tensors_);
  return f;
}

GgufFile GgufFile::open(const std::string& path) {
  auto file = std::make_shared<const MappedFile>(path);
  const std::byte* data = file->data();
  const uint64_t size = file->size();
  GgufFile f = from(std::move(file), data, size, path);
  f.mapped_ = true;
  return f;
}

void GgufFile::release(std::span<const std::byte> bytes) const {
  if (!mapped_ || bytes.empty()) return;
  // Dropping pages of a read-only file mapping loses nothing: a later read
  // maps them again from the page cache (or the file). Never done to the
  // owned bytes of parse(), which it would zero.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(bytes.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice: nothing to report
}

GgufFile GgufFile::parse(std::string bytes, const std::string& name_for_errors) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  const auto* data = reinterpret_cast<const std::byte*>(owned->data());
  const uint64_t size = owned->size();
  return from(std::move(owned), data, size, name_for_errors);
}

}  // namespace qkv
