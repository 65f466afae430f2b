#include "cli_common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

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

bool stdout_wants_color() {
  const char* no_color = std::getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

}  // namespace qkv::cli
