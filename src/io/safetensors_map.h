// io/safetensors_map.h: a safetensors file mapped into memory, so that a
// model uses its tensors where they lie instead of copying them.
//
// The mapping is io/mapped_file.h's (read-only, private, the system's file
// cache). The header is checked as strictly as every safetensors reader
// here checks it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "qkv/export.h"
#include "qkv/safetensors.h"

namespace qkv {

class QKV_API SafetensorsMapping {
 public:
  // Maps the file at `path`, its page tables made at once (populate) or as
  // pages are first read; errors name it (a missing file, a bad header, a
  // file that cannot be mapped).
  explicit SafetensorsMapping(const std::string& path, bool populate = true);
  // Out of line: the mapping's destructor is io's own, not exported.
  ~SafetensorsMapping();
  SafetensorsMapping(const SafetensorsMapping&) = delete;
  SafetensorsMapping& operator=(const SafetensorsMapping&) = delete;

  // The first byte of tensor `name`'s data, or null when the file has none.
  const std::byte* data(const std::string& name) const;
  // Tensor `name`'s pages (and any others sharing them) leave this
  // process's memory; they stay in the file cache, and a later read maps
  // them again. For a tensor read once, so that reading a whole file does
  // not hold all of it at once.
  void release(const std::string& name) const;
  // The same for the whole pages within `bytes` at `data`, which must lie in
  // a read-only file mapping: a mapped tensor copied elsewhere and not
  // read again (the pages it shares with its neighbours stay).
  static void release_pages(const void* data, size_t bytes);
  // The tensors, as the header lists them.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }

 private:
  MappedFile file_;
  std::vector<SafetensorsEntry> entries_;
  struct Span {
    uint64_t offset, bytes;  // from the file's first byte
  };
  std::map<std::string, Span> span_;
};

}  // namespace qkv
