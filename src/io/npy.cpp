#include "qkv/npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "io/files.h"
#include "io/byte_source.h"
#include "io/npy_header.h"
#include "qkv/view.h"

namespace qkv {

// Tensors hold native-order bytes and .npy data is written as '<f4' etc., so
// both directions are plain copies only on a little-endian host.
static_assert(std::endian::native == std::endian::little, "qkv's .npy code assumes little-endian");

namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);
// NumPy itself refuses headers over 10000 bytes unless told otherwise; this
// looser cap only stops a corrupt length field from making us read gigabytes.
constexpr uint64_t kMaxHeaderLen = 1 << 20;

// Where the bytes come from: a file read piece by piece (so the data goes
// straight into the tensor) or a buffer already in memory.

std::string prefix(const std::string& name) { return "'" + name + "': "; }

const char* descr_of(DType dt) {
  switch (dt) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::boolean: return "|b1";
    case DType::bf16: break;  // NumPy has none; npy_header refuses it
  }
  return "?";
}

// NumPy's name for a dtype string we do not read, to make the message
// actionable: '<i8' -> "int64", 'O' -> "Python objects".
std::string numpy_type_name(const std::string& descr) {
  std::string_view d = descr;
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) d.remove_prefix(1);
  if (d.empty()) return "empty dtype";
  // The item size in bits from the digits after the letter; none for a size
  // no real dtype has (more than 4 digits would overflow * 8 in an int).
  const std::string_view size = d.substr(1);
  const bool sized = !size.empty() && size.size() <= 4 &&
                     size.find_first_not_of("0123456789") == std::string_view::npos;
  const std::string bits = sized ? std::to_string(std::atoi(std::string(size).c_str()) * 8) : "";
  switch (d[0]) {
    case 'b': return "bool";
    case 'i': return "int" + bits;
    case 'u': return "uint" + bits;
    case 'f': return "float" + bits;
    case 'c': return "complex" + bits;
    case 'O': return "Python objects";
    case 'U': return "unicode strings";
    case 'S': return "byte strings";
    case 'V': return "raw void records";
    case 'M': return "datetime64";
    case 'm': return "timedelta64";
  }
  return "unknown dtype";
}

struct FileDType {
  DType dtype;
  bool big_endian;  // '>f4', '>f8': bytes swapped on load
};

FileDType dtype_from_descr(const std::string& descr, const std::string& name) {
  for (DType dt : {DType::f32, DType::f64, DType::boolean})
    if (descr == descr_of(dt)) return {dt, false};
  if (descr == ">f4") return {DType::f32, true};
  if (descr == ">f8") return {DType::f64, true};
  throw Error(prefix(name) + "unsupported dtype '" + descr + "' (" + numpy_type_name(descr) +
              "); qkv reads '<f4' float32, '<f8' float64 and '|b1' bool (and big-endian '>f4', '>f8')");
}

// Big-endian elements of `item` bytes to this (little-endian) host's order.
void swap_bytes(std::byte* data, int64_t n, size_t item) {
  for (int64_t i = 0; i < n; ++i) std::reverse(data + i * item, data + (i + 1) * item);
}

// The strides of a Fortran-ordered (column-major) array: the first dim
// varies fastest.
Strides fortran_strides(const Shape& shape) {
  Strides s(shape.size(), 1);
  for (size_t d = 1; d < shape.size(); ++d) s[d] = s[d - 1] * shape[d - 1];
  return s;
}

uint64_t read_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

struct RawHeader {
  std::string text;     // the Python dict literal
  uint64_t data_start;  // offset of the first data byte
};

// Checks the magic, version and header length, and reads the header text.
RawHeader read_header(const ByteSource& src, const std::string& name) {
  unsigned char pre[12] = {};
  const size_t npre = static_cast<size_t>(std::min<uint64_t>(src.size, sizeof pre));
  src.read(0, npre, reinterpret_cast<std::byte*>(pre));
  const std::string_view got(reinterpret_cast<const char*>(pre), std::min<size_t>(npre, kMagic.size()));
  if (src.size == 0) throw Error(prefix(name) + "not a .npy file: it is empty");
  if (got != kMagic.substr(0, got.size())) {
    const bool zip = got.substr(0, 2) == "PK";
    throw Error(prefix(name) + "not a .npy file: expected magic \"\\x93NUMPY\", found " + quoted(got, 6) +
                (zip ? " (a zip archive: is it an .npz?)" : ""));
  }
  if (npre < 8)
    throw Error(prefix(name) + "truncated .npy header: file is " + std::to_string(npre) +
                " bytes, the preamble alone needs at least 10");
  const int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    throw Error(prefix(name) + "unsupported .npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (qkv reads 1.0, 2.0 and 3.0)");
  // 1.0 stores the header length in 2 bytes; 2.0 and 3.0 (UTF-8 header) in 4.
  const int len_bytes = major == 1 ? 2 : 4;
  const uint64_t header_start = 8 + len_bytes;
  if (src.size < header_start)
    throw Error(prefix(name) + "truncated .npy header: file is " + std::to_string(src.size) +
                " bytes, format " + std::to_string(major) + ".0 needs " + std::to_string(header_start) +
                " before the header");
  const uint64_t header_len = read_le(pre + 8, len_bytes);
  if (header_len > kMaxHeaderLen)
    throw Error(prefix(name) + "implausible .npy header length " + std::to_string(header_len) +
                " (qkv's limit is " + std::to_string(kMaxHeaderLen) + ")");
  const uint64_t data_start = header_start + header_len;
  if (data_start > src.size)
    throw Error(prefix(name) + "truncated .npy header: it claims " + std::to_string(header_len) +
                " bytes, the file has " + std::to_string(src.size - header_start) + " after the preamble");
  RawHeader raw{std::string(static_cast<size_t>(header_len), '\0'), data_start};
  src.read(header_start, raw.text.size(), reinterpret_cast<std::byte*>(raw.text.data()));
  return raw;
}

Tensor decode(const ByteSource& src, const std::string& name) {
  const auto [text, data_start] = read_header(src, name);
  const NpyHeader h = parse_npy_header(text, name);
  const auto [dtype, big_endian] = dtype_from_descr(h.descr, name);
  int64_t numel = 0;
  try {
    numel = shape_numel(h.shape);
  } catch (const Error& e) {
    throw Error(prefix(name) + e.what());
  }
  const uint64_t item = dtype_size(dtype);
  // Checked against what the file holds before the tensor is allocated, so a
  // lying header costs nothing.
  const uint64_t have = src.size - data_start;
  const uint64_t n = static_cast<uint64_t>(numel);
  const bool overflow = n > std::numeric_limits<uint64_t>::max() / item;
  if (overflow || n * item != have)
    throw Error(prefix(name) + "expects " + (overflow ? "more than 2^64" : std::to_string(n * item)) +
                " bytes of data for shape " + shape_str(h.shape) + " " + dtype_name(dtype) + ", found " +
                std::to_string(have));
  Tensor t(dtype, h.shape);
  src.read(data_start, t.nbytes(), t.raw());
  if (big_endian) swap_bytes(t.raw(), numel, item);
  if (dtype == DType::boolean) {
    const auto* b = reinterpret_cast<const unsigned char*>(t.raw());
    for (int64_t i = 0; i < numel; ++i)
      if (b[i] > 1)
        throw Error(prefix(name) + "bool element " + std::to_string(i) + " is byte " + std::to_string(b[i]) +
                    ", expected 0 or 1");
  }
  // A Tensor is C-ordered: a Fortran-ordered file is read as it lies, then
  // transposed through a view of it (one extra copy, at load time only).
  if (h.fortran_order && t.rank() > 1)
    return TensorView(t.raw(), dtype, h.shape, fortran_strides(h.shape)).contiguous();
  return t;
}

// Owns a file descriptor for the length of read_npy.

std::string npy_header(const Tensor& t) {
  if (t.dtype() == DType::bf16)
    throw Error("npy: NumPy has no bfloat16; convert the tensor to float32 (Tensor::to) first");
  std::string shape = "(";
  for (int i = 0; i < t.rank(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  shape += t.rank() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descr_of(t.dtype()) +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // np.save leaves room for the first dim to grow to 21 digits in place.
  if (t.rank() > 0) dict.append(21 - std::to_string(t.shape()[0]).size(), ' ');
  // As np.save: format 1.0 unless the header outgrows its 2-byte length, and
  // magic + version + length + header + '\n' padded to a multiple of 64.
  for (const int len_bytes : {2, 4}) {
    const size_t unpadded = 8 + len_bytes + dict.size() + 1;
    const size_t header_len = dict.size() + 1 + (64 - unpadded % 64);
    if (len_bytes == 2 && header_len > 0xffff) continue;
    std::string out(kMagic);
    out += static_cast<char>(len_bytes == 2 ? 1 : 2);
    out += '\0';
    for (int i = 0; i < len_bytes; ++i) out += static_cast<char>((header_len >> (8 * i)) & 0xff);
    out += dict;
    out.append(64 - unpadded % 64, ' ');
    return out + '\n';
  }
  throw Error("write_npy: header for shape " + shape_str(t.shape()) + " is too long");
}

std::string_view data_view(const Tensor& t) {
  return {reinterpret_cast<const char*>(t.raw()), t.nbytes()};
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& name_for_errors) {
  return decode(memory_source(bytes), name_for_errors);
}

Tensor read_npy(const std::string& path) {
  Tensor t;
  with_file_source(path, [&](const ByteSource& src) { t = decode(src, path); });
  return t;
}

std::string npy_bytes(const Tensor& t) { return npy_header(t) + std::string(data_view(t)); }

void write_npy(const std::string& path, const Tensor& t) {
  write_file_atomic(path, {npy_header(t), data_view(t)});
}

void stage_npy(FileSet& files, const std::string& path, const Tensor& t) {
  files.stage(path, {npy_header(t), data_view(t)});
}

}  // namespace qkv
