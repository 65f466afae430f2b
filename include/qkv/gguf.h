/// @file
/// qkv/gguf.h: GGUF files, the format llama.cpp writes: metadata (the
/// model's hyperparameters, its tokenizer) and tensors, often quantized.
///
/// Layout (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md),
/// versions 2 and 3, every number little-endian:
///   4 bytes   magic "GGUF"
///   u32       version
///   u64       tensor count, then u64 metadata count
///   metadata  per entry: key (a string), u32 value type, the value
///   tensors   per tensor: name (a string), u32 n_dims (at most 4),
///             u64 dims[n_dims] (ne[0] first), u32 ggml type, u64 offset
///   padding   to a multiple of the alignment: metadata "general.alignment"
///             (UINT32, a power of two), 32 when absent
///   data      each tensor at the data section's start + its offset
/// A string is a u64 byte count and the bytes (no terminator); an array is
/// a u32 element type, a u64 count and the elements.
///
/// Reading is strict and bounded: every count and length is checked against
/// what remains of the file before anything is allocated; each tensor's byte
/// size comes from its ggml type's block (ggml_type_layout), must not
/// overflow, and its bytes must lie inside the file at an aligned offset,
/// apart from every other tensor's. Version 1, big-endian files, duplicate
/// keys or tensor names, unknown value or tensor types are refused. Every
/// failure is a qkv::Error "'FILE': FIELD: what was expected, what was found".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"

namespace qkv {

/// The type of a metadata value, with GGUF's numbers.
enum class GgufType : uint32_t {
  u8 = 0,        ///< UINT8
  i8 = 1,        ///< INT8
  u16 = 2,       ///< UINT16
  i16 = 3,       ///< INT16
  u32 = 4,       ///< UINT32
  i32 = 5,       ///< INT32
  f32 = 6,       ///< FLOAT32
  boolean = 7,   ///< BOOL, one byte: 0 or 1
  string = 8,    ///< STRING
  array = 9,     ///< ARRAY
  u64 = 10,      ///< UINT64
  i64 = 11,      ///< INT64
  f64 = 12       ///< FLOAT64
};
/// GGUF's name of a value type: "UINT8", ..., "FLOAT64"; "?" if unknown.
QKV_API const char* gguf_type_name(GgufType t);

/// One metadata value, held exactly: UINT8..UINT64 and BOOL (0 or 1) as
/// uint64_t, INT8..INT64 as int64_t, FLOAT32 and FLOAT64 as double, STRING as
/// its bytes; an array of these as a vector of the same, and an array of
/// arrays as a vector of GgufValue (each inner array has its own element type).
struct QKV_API GgufValue {
  GgufType type = GgufType::u8;          ///< its type
  GgufType element_type = GgufType::u8;  ///< an array's element type (arrays only)
  /// The value, by the rule above.
  std::variant<uint64_t, int64_t, double, std::string, std::vector<uint64_t>, std::vector<int64_t>,
               std::vector<double>, std::vector<std::string>, std::vector<GgufValue>>
      data;

  /// Values to write (GgufWriter), one of each common type:
  static GgufValue string(std::string s);  ///< a STRING
  static GgufValue u32(uint32_t v);        ///< a UINT32
  static GgufValue i32(int32_t v);         ///< an INT32
  static GgufValue f32(float v);           ///< a FLOAT32
  static GgufValue boolean(bool v);        ///< a BOOL
  static GgufValue strings(std::vector<std::string> v);  ///< an ARRAY of STRING
  static GgufValue i32s(std::vector<int64_t> v);         ///< an ARRAY of INT32 (each must fit)
  static GgufValue f32s(std::vector<double> v);          ///< an ARRAY of FLOAT32
};

/// What the GGUF format says of one of ggml's tensor types: enough to know
/// a tensor's byte size. Whether qkv can compute with it is qkv/weight_type.h.
struct GgmlTypeLayout {
  uint32_t id;           ///< ggml's number, as in the file
  const char* name;      ///< ggml's name, e.g. "Q4_K"
  int64_t block;         ///< elements per block (1 for F32, F16, BF16, ...)
  uint64_t block_bytes;  ///< bytes per block
};
/// The layout of ggml type `id`, or null if ggml has no such type.
QKV_API const GgmlTypeLayout* ggml_type_layout(uint32_t id);

/// One tensor of the file.
struct GgufTensor {
  std::string name;    ///< its name
  uint32_t ggml_type;  ///< ggml's type id (ggml_type_layout tells its name and block)
  /// Its dims in ggml's order, ne[0] first: shape[0] varies fastest (a row of
  /// a matrix), the reverse of NumPy's and PyTorch's order. Up to 4 dims.
  Shape shape;
  uint64_t offset;                   ///< from the data section's start
  std::span<const std::byte> bytes;  ///< its data, where it lies in the file's mapping
};

/// A parsed GGUF file. Its tensors' bytes stay in the mapped file (or the
/// bytes given to parse), which lives as long as any copy of this object.
class QKV_API GgufFile {
 public:
  /// Maps the file at `path` read-only and parses it; errors name the path.
  static GgufFile open(const std::string& path);
  /// Parses a whole file held in memory (a copy is kept); `name_for_errors`
  /// stands in for the path in messages. For tests and fuzzing.
  static GgufFile parse(std::string bytes, const std::string& name_for_errors);

  const std::string& name() const { return name_; }  ///< the path, for messages
  uint32_t version() const { return version_; }       ///< 2 or 3
  uint64_t alignment() const { return alignment_; }   ///< of the data and each tensor's offset
  uint64_t data_offset() const { return data_offset_; }  ///< the data section's first byte

  /// The metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  /// The value of `key`, or null when the file has none.
  const GgufValue* find(const std::string& key) const;

  /// Typed reads of metadata. A missing key, or a value of another type, is a
  /// qkv::Error naming the file, the key and both types, e.g.
  ///   'm.gguf': metadata "llama.block_count": expected an integer, found STRING
  /// A STRING.
  const std::string& get_string(const std::string& key) const;
  /// Any integer type whose value fits int64_t.
  int64_t get_int(const std::string& key) const;
  /// FLOAT32 or FLOAT64.
  double get_float(const std::string& key) const;
  /// A BOOL.
  bool get_bool(const std::string& key) const;
  /// An ARRAY of STRING.
  const std::vector<std::string>& get_strings(const std::string& key) const;
  /// An ARRAY of any integer type, every value fitting int64_t.
  std::vector<int64_t> get_ints(const std::string& key) const;
  /// An ARRAY of FLOAT32 or FLOAT64.
  const std::vector<double>& get_floats(const std::string& key) const;

  /// The tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// Tensor `name`, or null when the file has none.
  const GgufTensor* find_tensor(const std::string& name) const;

  /// Says these bytes of the file (a tensor's, say, copied elsewhere) will
  /// not be read again: the pages wholly inside them leave the process's
  /// resident memory. They stay in the system's page cache, and a later
  /// read finds them there, the same bytes. Nothing for a parse()d file.
  void release(std::span<const std::byte> bytes) const;

 private:
  GgufFile() = default;
  static GgufFile from(std::shared_ptr<const void> keep, const std::byte* data, uint64_t size,
                       const std::string& name);
  const GgufValue& value_of(const std::string& key, const char* expected) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* expected, const GgufValue& v) const;

  std::shared_ptr<const void> keep_;  // the mapping or the owned bytes the spans point into
  bool mapped_ = false;               // keep_ is a read-only mapping of the file
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 0, data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// A GGUF file to write: version 3, metadata and tensors in the order
/// given, each tensor's data at a multiple of the alignment (32, or the
/// UINT32 metadata "general.alignment"). What GgufFile reads back, and what
/// llama.cpp and the gguf Python package read.
class QKV_API GgufWriter {
 public:
  /// Fills `out` (the tensor's byte size) with the tensor's data.
  using Fill = std::function<void(std::byte* out)>;

  /// Metadata `key` = `value`; a key given twice is a qkv::Error.
  void set(const std::string& key, GgufValue value);
  /// A tensor of dims `ne` (ggml's order, ne[0] first, 1 to 4 dims) and
  /// ggml type `ggml_type`, whose bytes `fill` writes when the file is
  /// written, one tensor at a time (a model larger than memory can be
  /// written). A name given twice, an unknown type, or ne[0] not a multiple
  /// of the type's block is a qkv::Error.
  void add_tensor(const std::string& name, const Shape& ne, uint32_t ggml_type, Fill fill);
  /// Writes the file at `path` atomically (a temporary renamed over it, so
  /// that a failed write leaves any old file as it was); errors name it.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    Shape ne;
    uint32_t type;
    uint64_t bytes;
    Fill fill;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace qkv
