// model_threads.h: --threads of the commands that run a model (sample,
// logits, embed, explain --model).
#pragma once

#include <optional>

#include <CLI/CLI.hpp>

namespace qkv::cli {

// Adds --threads to `cmd`, read into `threads`: unset, the machine's physical
// cores (qkv::physical_cores(), as llama.cpp and PyTorch default to the
// cores); 0, every core OpenMP sees; checked as an int.
void add_model_threads(CLI::App* cmd, std::optional<int>& threads);

// The count to run with: the option's, checked (a UsageError naming
// --threads), or the physical cores when it was not given.
int model_threads(const std::optional<int>& threads);

}  // namespace qkv::cli
