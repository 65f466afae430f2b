// path_options.h: the files and folders a command reads and writes, declared
// once per command and checked before it runs, so that no output can land on
// an input or on another output.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace qkv::cli {

// The paths a command reads and writes, by option: declared once per
// command (path_options) and checked together by main() before the command
// runs (check_path_options), so that no command can forget the check.
struct PathOptions {
  std::vector<std::string> reads;      // files it reads ("--q"; "-" is stdin)
  std::vector<std::string> read_dirs;  // folders it reads a model from ("--model")
  std::vector<std::string> writes;     // files it writes ("--out", "--png")
  // A folder it writes into ("--out" of qkv import), with the names of the
  // files it writes there.
  struct Folder {
    std::string option;
    std::vector<std::string> names;
  };
  std::vector<Folder> write_dirs;
};

// Declares `cmd`'s path options. Each gets the empty-path check: "" is a
// usage error naming the option ("--out: expected a path, found an empty
// string"), not a later "cannot write ''" or a read of "/config.json" (an
// empty directory joined with a file name).
void path_options(CLI::App* cmd, PathOptions paths);

// Refuses the paths given to the parsed command `cmd` where writing one
// output would destroy what it reads or another output:
// - an output that names an existing directory (qkv::Error, exit 1);
// - an output that is an input file, or the same file as another output
//   (UsageError, exit 2);
// - an output inside a folder read whole (--model): a file of the folder,
//   or a new file there, since qkv writes nothing into a folder it reads
//   (UsageError).
// "The same file" is compared after resolving links, "." and ".." and, for
// files that exist, by device and inode, so "./x", a symlink or a hard link
// to x is x. "-", /dev/* and other devices and FIFOs are streams, not files,
// and are skipped; so are options not given and inputs that do not exist.
void check_path_options(const CLI::App& cmd);

}  // namespace qkv::cli
