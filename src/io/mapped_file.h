// io/mapped_file.h: a regular file mapped read-only into memory, so that a
// loader parses its header and hands out its tensors where they lie instead
// of copying them (the safetensors and GGUF readers).
//
// The mapping is read-only and private: its pages are the system's file
// cache (no copy, nothing zeroed), shared with any other process mapping the
// same file. A file truncated by another program while mapped makes a later
// read of the lost pages fail (SIGBUS), as with any mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qkv {

class MappedFile {
 public:
  // Maps the whole file at `path`. Errors are qkv::Error naming it: "cannot
  // open 'x': No such file or directory", "cannot read 'x': it is a
  // directory" (a FIFO or device is refused at once, never waited on),
  // "cannot map 'x': ...". An empty file maps to nothing: data() is null.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return static_cast<const std::byte*>(base_); }
  uint64_t size() const { return size_; }
  // Makes the page tables of the whole file now, in one pass, rather than
  // by a fault for every few pages a first use touches.
  void populate() const;

 private:
  void* base_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace qkv
