#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/files.h"
#include "qkv/error.h"

namespace qkv {
namespace {

// Owns a file descriptor for the length of one read.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

ByteSource memory_source(const std::string& bytes) {
  return memory_source(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
}

ByteSource memory_source(const std::byte* data, uint64_t size) {
  return {size, [data](uint64_t offset, size_t n, std::byte* dst) {
            if (n > 0) std::memcpy(dst, data + offset, n);
          }};
}

void with_file_source(const std::string& path, const std::function<void(const ByteSource&)>& fn) {
  // O_NONBLOCK so that opening a FIFO by mistake fails below instead of
  // waiting forever for a writer.
  const Fd f{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(f.fd, &st) != 0) throw Error("cannot read '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw Error("cannot read '" + path + "': it is a directory");
  if (!S_ISREG(st.st_mode)) throw Error("cannot read '" + path + "': not a regular file");
  const ByteSource src{static_cast<uint64_t>(st.st_size),
                       [&](uint64_t offset, size_t n, std::byte* dst) {
                         while (n > 0) {
                           const ssize_t got = pread(f.fd, dst, n, static_cast<off_t>(offset));
                           if (got < 0 && errno == EINTR) continue;
                           if (got < 0)
                             throw Error("cannot read '" + path + "': " + std::strerror(errno));
                           if (got == 0) throw Error("'" + path + "': file shrank while being read");
                           dst += got;
                           offset += static_cast<uint64_t>(got);
                           n -= static_cast<size_t>(got);
                         }
                       }};
  fn(src);
}

std::string read_file(const std::string& path) {
  std::string text;
  with_file_source(path, [&](const ByteSource& src) {
    text.resize(static_cast<size_t>(src.size));
    src.read(0, text.size(), reinterpret_cast<std::byte*>(text.data()));
  });
  return text;
}

}  // namespace qkv
