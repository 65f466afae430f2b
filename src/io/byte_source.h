// byte_source.h: where a loader's bytes come from, a file or a buffer.
//
// Loaders (.npy, safetensors) read through a ByteSource piece by piece, so
// they can check a header's claimed sizes against the real size before
// allocating anything, and tensor data goes straight into its tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace qkv {

struct ByteSource {
  uint64_t size;
  // Copies n bytes at offset (offset + n <= size) to dst; throws qkv::Error.
  std::function<void(uint64_t offset, size_t n, std::byte* dst)> read;
};

// A source over bytes already in memory (they must outlive it).
ByteSource memory_source(const std::string& bytes);
ByteSource memory_source(const std::byte* data, uint64_t size);

// Opens `path` as a regular file (a directory, FIFO or device is refused at
// once, never waited on) and runs fn on a source that reads it with pread.
// Errors name the path: "cannot open 'x': No such file or directory".
void with_file_source(const std::string& path, const std::function<void(const ByteSource&)>& fn);

}  // namespace qkv
