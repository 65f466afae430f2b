// cli_common.h: what every qkv command shares: error kinds and exit codes,
// loading inputs with errors that name the argument.
//
// Exit codes: 0 success, 1 bad data (unreadable file, wrong shapes, NaN),
// 2 usage error (unknown flag, malformed option value).
#pragma once

#include <stdexcept>
#include <string>

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

// The machine's physical memory in bytes (sysconf), 0 when unknown.
double machine_memory_bytes();

// Refuses a request before any of it is allocated: when `bytes` (what `what`
// needs, e.g. "--weights [2, 100000, 100000] float32") exceed the machine's
// memory, returns the one-line reason ("... would take 74.5 GiB, more than this
// machine's 23.5 GiB of memory"); otherwise "". A double, so that sizes whose
// product overflows 64 bits are still compared correctly. The caller throws
// UsageError when the sizes came from options, qkv::Error when from files.
std::string memory_shortfall(const std::string& what, double bytes);

// True when stdout is a terminal that should get colour (and NO_COLOR unset).
bool stdout_wants_color();

}  // namespace qkv::cli
