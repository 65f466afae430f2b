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
#include <map>
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

namespace fs = std::filesystem;

// Each command's declared path options (path_options), found again by
// check_path_options for the command that was parsed.
std::map<const CLI::App*, PathOptions>& declared() {
  static std::map<const CLI::App*, PathOptions> registry;
  return registry;
}

// The path with links, "." and ".." resolved as far as it exists. A link is
// followed to its final target even where that does not exist yet, since
// FileSet writes through it there.
fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path at = fs::absolute(p, ec);
  for (int hops = 0; hops < 40 && fs::is_symlink(at, ec); ++hops) {
    const fs::path to = fs::read_symlink(at, ec);
    if (ec) break;
    at = to.is_absolute() ? to : at.parent_path() / to;
  }
  fs::path r = fs::weakly_canonical(at, ec);
  return ec ? at.lexically_normal() : r;
}

// Whether `inner` is `outer` or lies somewhere under it.
bool within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++i, ++o) {
    if (o->empty() && std::next(o) == outer.end()) break;  // a trailing "/"
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

// "-" (stdin or stdout), /dev/stdout and friends: reading or writing them
// never touches a file of ours.
bool is_stream(const std::string& given) {
  if (given == "-") return true;
  std::error_code ec;
  const std::string p = resolved(given).string();
  // A regular file under /dev (/dev/shm) is a file like any other.
  return p.rfind("/proc/", 0) == 0 || fs::is_character_file(p, ec) ||
         fs::is_block_file(p, ec) || fs::is_fifo(p, ec) || fs::is_socket(p, ec);
}

// One path given to an option, as written and as resolved.
struct Given {
  std::string option, path;
  fs::path real;
};

// Whether two paths name one file: the same resolved path, or (for files
// that exist) the same device and inode: a hard link.
bool same_file(const Given& a, const Given& b) {
  std::error_code ec;
  return a.real == b.real || fs::equivalent(a.real, b.real, ec);
}

// Whether the existing file `out` is also one of `dir`'s own files under
// another name (a hard link to it from outside the folder).
bool linked_from(const fs::path& out, const fs::path& dir) {
  std::error_code ec;
  if (fs::hard_link_count(out, ec) < 2 || ec) return false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code eq;
    if (fs::equivalent(it->path(), out, eq)) return true;
  }
  return false;
}

// The value of option `name` of `cmd`; "" when it was not given or names a
// stream, which takes part in no check.
std::string value_of(const CLI::App& cmd, const std::string& name) {
  const CLI::Option* opt = cmd.get_option(name);
  if (opt->count() == 0) return "";
  const std::string v = opt->as<std::string>();
  return v.empty() || is_stream(v) ? "" : v;
}

// An output against the inputs: never one of them (a file), nor a file in a
// folder read whole.
void refuse_output_over_inputs(const Given& out, const std::vector<Given>& files,
                               const std::vector<Given>& folders) {
  for (const Given& in : files) {
    if (!same_file(out, in)) continue;
    // A hard link is replaced, not written through: the input would survive,
    // the link to it would not.
    const std::string what = out.real == in.real
                                 ? "would overwrite what " + in.option + " '" + in.path + "' holds"
                                 : "is a hard link to " + in.option + "'s file '" + in.path + "'";
    throw UsageError(out.option + ": '" + out.path + "' " + what + "; write it somewhere else");
  }
  std::error_code ec;
  for (const Given& dir : folders) {
    const bool exists = fs::exists(out.real, ec), inside = within(out.real, dir.real);
    std::string what;
    if (exists && inside) what = "would overwrite what " + dir.option + " '" + dir.path + "' holds";
    else if (inside)
      what = "lies inside " + dir.option + "'s folder '" + dir.path +
             "', and qkv writes nothing into a folder it reads a model from";
    else if (exists && linked_from(out.real, dir.real))
      what = "is a hard link to a file of " + dir.option + "'s folder '" + dir.path + "'";
    if (!what.empty())
      throw UsageError(out.option + ": '" + out.path + "' " + what + "; write it somewhere else");
  }
}

}  // namespace

void path_options(CLI::App* cmd, PathOptions paths) {
  const CLI::Validator nonempty(
      [](std::string& s) { return s.empty() ? std::string("expected a path, found an empty string") : ""; },
      "");
  auto check = [&](const std::string& name) { cmd->get_option(name)->check(nonempty)->type_name("PATH"); };
  for (const auto* names : {&paths.reads, &paths.read_dirs, &paths.writes})
    for (const std::string& name : *names) check(name);
  for (const PathOptions::Folder& f : paths.write_dirs) check(f.option);
  declared()[cmd] = std::move(paths);
}

void check_path_options(const CLI::App& cmd) {
  const auto it = declared().find(&cmd);
  if (it == declared().end()) return;  // a command that names no path
  const PathOptions& p = it->second;
  auto given = [&](const std::string& option, const std::string& path, std::vector<Given>& to) {
    if (!path.empty()) to.push_back({option, path, resolved(path)});
  };
  std::error_code ec;
  std::vector<Given> files, folders, outs;
  for (const std::string& name : p.reads) {
    const std::string v = value_of(cmd, name);
    if (fs::exists(v, ec)) given(name, v, files);  // a missing input is the command's to report
  }
  for (const std::string& name : p.read_dirs) {
    const std::string v = value_of(cmd, name);
    if (fs::is_directory(v, ec)) given(name, v, folders);
  }
  for (const std::string& name : p.writes) {
    const std::string v = value_of(cmd, name);
    if (fs::is_directory(v, ec))
      throw Error(name + ": cannot write '" + v + "': it is a directory; expected a file path");
    given(name, v, outs);
  }
  for (const PathOptions::Folder& f : p.write_dirs) {
    const std::string dir = value_of(cmd, f.option);
    for (const std::string& name : f.names)
      if (!dir.empty()) given(f.option, (fs::path(dir) / name).string(), outs);
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    refuse_output_over_inputs(outs[i], files, folders);
    for (size_t j = 0; j < i; ++j) {
      if (!same_file(outs[j], outs[i])) continue;
      const std::string what = outs[j].path == outs[i].path
                                   ? "both name '" + outs[i].path + "'"
                                   : "'" + outs[j].path + "' and '" + outs[i].path + "' are one file";
      throw UsageError(outs[j].option + ", " + outs[i].option + ": " + what +
                       "; give each output its own file");
    }
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
