#include "io/files.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
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

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Where a chain of symlinks ends (the path itself when it is not a link), so
// that writing through a link replaces its target and keeps the link. Only
// the last component needs this: rename() follows links in the directories.
std::string follow_symlinks(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {  // 40: Linux's own limit (ELOOP)
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string link(PATH_MAX, '\0');
    const ssize_t n = readlink(p.c_str(), link.data(), link.size());
    if (n < 0) fail(path, errno);
    link.resize(static_cast<size_t>(n));
    p = link.front() == '/' ? link : dir_of(p) + "/" + link;
  }
  fail(path, ELOOP);
}

// Opens a fresh temporary in `dir`. The name is short and fixed in length
// (kTempPrefix, the pid, a counter), so a legal 255-byte target name never
// makes it too long; the pid and the counter keep concurrent writers apart.
// O_EXCL with mode 0666 lets the umask give the file the permissions a plain
// create would have, which mkstemp's 0600 would not.
int open_temp(const std::string& dir, std::string& tmp) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp = dir + "/" + std::string(kTempPrefix) + std::to_string(getpid()) + "." +
          std::to_string(counter++);
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

// A device, FIFO or socket is not ours to replace (renaming over /dev/null
// as root would destroy it): its bytes go to it directly. No fsync: devices
// and pipes refuse it, and there is no file to make durable.
void write_in_place(const std::string& path, const std::string& target, const FileSet::Producer& produce) {
  const int fd = open(target.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(path, errno);
  try {
    produce([&](std::string_view part) {
      if (!write_all(fd, part)) fail(path, errno ? errno : EIO);
    });
  } catch (...) {
    close(fd);
    throw;
  }
  if (close(fd) != 0) fail(path, errno);
}

// Makes a rename durable; best effort, since some file systems refuse fsync
// on a directory and the data is already safe either way.
void sync_dir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

}  // namespace

FileSet::~FileSet() {
  for (const Staged& s : staged_) unlink(s.tmp.c_str());
}

void FileSet::stage(const std::string& path, std::initializer_list<std::string_view> parts) {
  stage_with(path, [&](const Sink& write) {
    for (std::string_view part : parts) write(part);
  });
}

void FileSet::stage_with(const std::string& path, const Producer& produce) {
  struct stat st;
  // A device, FIFO or socket is written in place through the path itself:
  // /dev/stdout on a pipe is a link to /proc/self/fd/1, a magic link whose
  // text ("pipe:[123]") names nothing, so it cannot be followed by name.
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return write_in_place(path, path, produce);
  Staged s{path, follow_symlinks(path), ""};
  if (stat(s.target.c_str(), &st) == 0) {
    // Refused now rather than at the rename, so that no other file of the
    // set has been replaced by then.
    if (S_ISDIR(st.st_mode)) fail(path, EISDIR);
    if (!S_ISREG(st.st_mode)) return write_in_place(path, s.target, produce);
  }
  const int fd = open_temp(dir_of(s.target), s.tmp);
  if (fd < 0) fail(path, errno);
  try {  // the producer's error, or a failed write: no temporary is left behind
    produce([&](std::string_view part) {
      if (!write_all(fd, part)) fail(path, errno ? errno : EIO);
    });
    if (fsync(fd) != 0) fail(path, errno);
  } catch (...) {
    close(fd);
    unlink(s.tmp.c_str());
    throw;
  }
  if (close(fd) != 0) {
    const int err = errno;
    unlink(s.tmp.c_str());
    fail(path, err);
  }
  staged_.push_back(std::move(s));
}

void FileSet::commit() {
  for (size_t i = 0; i < staged_.size(); ++i) {
    if (std::rename(staged_[i].tmp.c_str(), staged_[i].target.c_str()) != 0) {
      const int err = errno;
      const std::string path = staged_[i].path;
      staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(i));
      fail(path, err);  // the destructor removes the temporaries not renamed
    }
  }
  for (const Staged& s : staged_) sync_dir(dir_of(s.target));
  staged_.clear();
}

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  FileSet files;
  files.stage(path, parts);
  files.commit();
}

}  // namespace qkv
