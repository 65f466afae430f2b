#include "path_options.h"

#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "cli_common.h"
#include "qkv/error.h"

namespace qkv::cli {

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
    else if (fs::is_regular_file(v, ec)) given(name, v, files);  // a model in one file (GGUF)
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

}  // namespace qkv::cli
