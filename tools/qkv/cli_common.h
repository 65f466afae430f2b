// cli_common.h: what every qkv command shares: error kinds and exit codes,
// loading inputs with errors that name the argument.
//
// Exit codes: 0 success, 1 bad data (unreadable file, wrong shapes, NaN),
// 2 usage error (unknown flag, malformed option value).
#pragma once

#include <charconv>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "path_options.h"
#include "qkv/runtime.h"
#include "support/files.h"
#include "qkv/tensor.h"

namespace qkv::cli {

constexpr int kExitData = 1;
constexpr int kExitUsage = 2;

// A problem with the command line itself: exit 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

// Reads a .npy file given to option `arg` (e.g. "--q"); on failure throws
// qkv::Error "--q: <reason>".
Tensor load_npy_arg(const std::string& arg, const std::string& path);

// Writes `t` to the file given to option `arg`; errors name the option.
void save_npy_arg(const std::string& arg, const std::string& path, const Tensor& t);

// Stages `t` in `files` for the file given to option `arg`; errors name the
// option. Nothing is written at `path` until files.commit().
void stage_npy_arg(FileSet& files, const std::string& arg, const std::string& path, const Tensor& t);

// `value` of option `opt` (e.g. "--threads") as a thread count in
// [0, max_threads()], 0 meaning all cores; otherwise a UsageError naming the
// option, the range and the value.
int parse_threads(const std::string& opt, const std::string& value);
void check_threads(const std::string& opt, int64_t value);

// A CLI11 check that an option's value is a decimal integer in T's range.
// CLI11 2.1 converts with strtoll/strtoull and no range check, so 10^20 would
// become INT64_MAX and -1 a huge unsigned --seed: both are usage errors here.
template <class T>
CLI::Validator integer_of_type() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        T x{};
        const char* end = s.data() + s.size();
        const auto [ptr, ec] = std::from_chars(s.data(), end, x);
        if (ec == std::errc() && ptr == end && !s.empty()) return "";
        return "expected an integer from " + std::to_string(std::numeric_limits<T>::min()) +
               " to " + std::to_string(std::numeric_limits<T>::max()) + ", found '" + s + "'";
      },
      "INT");
}

// Puts integer_of_type<T> on each named option of `cmd`.
template <class T>
void check_integers(CLI::App* cmd, std::initializer_list<const char*> names) {
  for (const char* name : names) cmd->get_option(name)->check(integer_of_type<T>());
}

// A count option: its name, its least value and what it takes, in words
// ("a number of texts >= 1").
struct Count {
  const char* name;
  int64_t least;
  const char* expected;
};

// Puts on each count option of `cmd` a check that its value is a decimal
// integer >= least within T, else a usage error saying what the option
// takes ("--batch: expected a number of texts >= 1, found '-1'"), where
// integer_of_type would quote T's whole range, negatives and all.
template <class T>
void check_counts(CLI::App* cmd, std::initializer_list<Count> counts) {
  for (const Count& c : counts)
    cmd->get_option(c.name)->check(CLI::Validator(
        [least = static_cast<T>(c.least), expected = std::string(c.expected)](std::string& s) -> std::string {
          T x{};
          const char* end = s.data() + s.size();
          const auto [ptr, ec] = std::from_chars(s.data(), end, x);
          if (ec == std::errc() && ptr == end && !s.empty() && x >= least) return "";
          const bool too_big = ec == std::errc::result_out_of_range && ptr == end && s[0] != '-';
          return "expected " + expected + ", found '" + s + "'" +
                 (too_big ? " (the most is " + std::to_string(std::numeric_limits<T>::max()) + ")" : "");
        },
        "INT"));
}

// machine_memory_bytes and memory_shortfall: qkv/runtime.h.
using qkv::machine_memory_bytes;
using qkv::memory_shortfall;

// The text given to option `opt`: the file's bytes, or standard input for
// "-"; errors name the option.
std::string read_text_arg(const std::string& opt, const std::string& path);
// The lines of a text, split at "\n" only (a "\r" before it stays: BERT's
// normalizer takes it for whitespace); a final "\n" starts no other line.
std::vector<std::string> split_lines(const std::string& text);

// Throws qkv::Error "cannot write to stdout: <reason>" once anything written
// to std::cout or stdout has failed (a full disk, a closed pipe): a command
// that streams (qkv sample) stops there instead of generating for nothing.
void check_stdout();

// Flushes std::cout and stdout; on a failed write returns the one-line
// reason ("cannot write to stdout: No space left on device"), else "".
std::string flush_stdout();

// This process's rank when an MPI launcher (mpirun, srun) started it, read
// from the launcher's environment, so known before MPI starts; 0 otherwise.
int launcher_rank();

// Writes `line` and a newline to stderr in one write(), so that lines of the
// ranks of an MPI job never mix. Every rank runs the command, and most
// errors (a bad option, a batch the ranks do not divide) hit them all: rank 0
// reports at once, any other rank only after a grace period in which rank
// 0's exit or MPI_Abort ends the job, so an error is reported once, by rank 0,
// unless it is another rank's own.
void report_error(const std::string& line);

// True when stdout is a terminal that should get colour (and NO_COLOR unset).
bool stdout_wants_color();

}  // namespace qkv::cli
