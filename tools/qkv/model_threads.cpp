#include "model_threads.h"

#include <string>

#include "cli_common.h"
#include "qkv/runtime.h"

namespace qkv::cli {

void add_model_threads(CLI::App* cmd, std::optional<int>& threads) {
  cmd->add_option("--threads", threads,
                  "threads (default: the machine's physical cores, " + std::to_string(physical_cores()) +
                      " here; 0: every core OpenMP sees, hardware threads included)")
      ->check(integer_of_type<int>());
}

int model_threads(const std::optional<int>& threads) {
  if (!threads) return physical_cores();
  check_threads("--threads", *threads);
  return *threads;
}

}  // namespace qkv::cli
