#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "qkv/error.h"

namespace qkv {
namespace {

[[noreturn]] void fail(const std::string& path, int err) {
  throw Error("cannot write '" + path + "': " + std::strerror(err));
}

// Opens a fresh temporary next to `path` (same directory, so the final rename
// cannot cross file systems). O_EXCL with mode 0666 lets the umask give the
// file the permissions a plain create would have, which mkstemp's 0600 would
// not; the pid and a counter keep concurrent writers apart.
int open_temp(const std::string& path, std::string& tmp) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp = path + ".tmp" + std::to_string(getpid()) + "." + std::to_string(counter++);
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // no progress and no errno: don't spin
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Makes the rename itself durable; best effort, since some file systems
// refuse fsync on a directory and the data is already safe either way.
void sync_parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  std::string tmp;
  const int fd = open_temp(path, tmp);
  if (fd < 0) fail(path, errno);
  bool ok = true;
  for (std::string_view part : parts) ok = ok && write_all(fd, part);
  ok = ok && fsync(fd) == 0;
  int err = ok ? 0 : errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp.c_str());
    fail(path, err ? err : EIO);
  }
  sync_parent_dir(path);
}

}  // namespace qkv
