#include "cli_common.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <cstdlib>

#include "support/files.h"
#include "qkv/npy.h"

namespace qkv::cli {

Tensor load_npy_arg(const std::string& arg, const std::string& path) {
  try {
    return read_npy(path);
  } catch (const Error& e) {
    throw Error(arg + ": " + e.what());
  }
}

void save_npy_arg(const std::string& arg, const std::string& path, const Tensor& t) {
  try {
    write_npy(path, t);
  } catch (const Error& e) {
    throw Error(arg + ": " + e.what());
  }
}

void stage_npy_arg(FileSet& files, const std::string& arg, const std::string& path, const Tensor& t) {
  try {
    stage_npy(files, path, t);
  } catch (const Error& e) {
    throw Error(arg + ": " + e.what());
  }
}

namespace {

int machine_cores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

[[noreturn]] void bad_threads(const std::string& opt, const std::string& value) {
  throw UsageError(opt + ": expected an integer from 0 (all cores) to " +
                   std::to_string(max_threads()) + " (4 x this machine's " +
                   std::to_string(machine_cores()) + " cores), found '" + value + "'");
}

}  // namespace

int max_threads() { return 4 * machine_cores(); }

int parse_threads(const std::string& opt, const std::string& value) {
  int64_t n = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (ec != std::errc() || ptr != end || n < 0 || n > max_threads()) bad_threads(opt, value);
  return static_cast<int>(n);
}

void check_threads(const std::string& opt, int64_t value) {
  if (value < 0 || value > max_threads()) bad_threads(opt, std::to_string(value));
}

double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::string memory_shortfall(const std::string& what, double bytes) {
  const double have = machine_memory_bytes();
  if (have <= 0.0 || bytes <= have) return "";
  char buf[160];
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::snprintf(buf, sizeof buf, " would take %.4g GiB, more than this machine's %.1f GiB of memory",
                bytes / kGiB, have / kGiB);
  return what + buf;
}

namespace {

// Why stdout failed. The failed write() set errno, but stdio and iostreams
// keep only a flag, so errno is trusted only for the reasons a write to
// stdout gives; anything else may be left over from an unrelated call.
std::string stdout_error() {
  const int err = errno;
  for (int known : {ENOSPC, EPIPE, EIO, EDQUOT, EFBIG, EBADF, ENXIO})
    if (err == known) return std::string("cannot write to stdout: ") + std::strerror(err);
  return "cannot write to stdout: write error";
}

}  // namespace

void check_stdout() {
  if (!std::cout || std::ferror(stdout)) throw Error(stdout_error());
}

std::string flush_stdout() {
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout;
  return failed ? stdout_error() : "";
}

bool stdout_wants_color() {
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

}  // namespace qkv::cli
