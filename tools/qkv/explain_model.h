// explain_model.h: `qkv explain --model`, what a trained model attends to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace qkv::cli {

struct ExplainModelArgs {
  std::string model_dir, prompt;
  std::string png, html, weights_npy;  // outputs; empty = not written
  std::optional<int64_t> layer, head;  // one layer, one head, or both: one panel
  bool color = false;
  std::optional<int> threads;  // unset: the physical cores (model_threads.h)
};

// Runs the checkpoint on the prompt and shows every selected layer and
// head's attention weights: shaded in the terminal, and as a PNG grid
// (layers x heads), a self-contained HTML page and a [layers, heads, T, T]
// float32 .npy file when asked.
int explain_model(const ExplainModelArgs& a);

}  // namespace qkv::cli
