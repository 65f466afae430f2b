#include "cli_common.h"

#include <cstdlib>
#include <unistd.h>

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

bool stdout_wants_color() {
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

}  // namespace qkv::cli
