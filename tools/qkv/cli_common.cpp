#include "cli_common.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "support/files.h"
#include "qkv/npy.h"
#include "qkv/runtime.h"

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

[[noreturn]] void bad_threads(const std::string& opt, const std::string& value) {
  throw UsageError(opt + ": expected an integer from 0 (all cores) to " +
                   std::to_string(qkv::max_threads()) + ", found '" + value + "'");
}

}  // namespace

int parse_threads(const std::string& opt, const std::string& value) {
  int64_t n = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, n);
  if (ec != std::errc() || ptr != end) bad_threads(opt, value);
  check_threads(opt, n);
  return static_cast<int>(n);
}

void check_threads(const std::string& opt, int64_t value) {
  try {
    qkv::check_threads(value, opt);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
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

int launcher_rank() {
  // Open MPI's mpirun, and PMI-based launchers (Slurm's srun, MPICH).
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

void report_error(const std::string& line) {
  // Long enough for mpirun to notice rank 0's exit and stop the others.
  constexpr auto kGrace = std::chrono::seconds(3);
  if (launcher_rank() > 0) std::this_thread::sleep_for(kGrace);
  std::fflush(stdout);
  const std::string text = line + "\n";
  for (size_t at = 0; at < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + at, text.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
}

bool stdout_wants_color() {
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

std::string read_text_arg(const std::string& opt, const std::string& path) {
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    return s.str();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(opt + ": '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(opt + ": cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Error(opt + ": cannot read '" + path + "': read error");
  return s.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace qkv::cli
