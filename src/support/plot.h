// support/plot.h: the training loss curve as a PNG.
#pragma once

#include <string>
#include <vector>

namespace qkv {

// Train loss (every logged iteration, thin blue) and validation loss (at each
// evaluation, orange with dots) against iteration, with axes, ticks and a
// legend. Written atomically; qkv::Error on failure. Empty series are fine.
void write_loss_png(const std::string& path, const std::vector<double>& train_iters,
                    const std::vector<double>& train_loss, const std::vector<double>& val_iters,
                    const std::vector<double>& val_loss);

// The loss curve of a whole run (resumed or not) from the trainer's
// log.jsonl: every line with "iter" and "train_loss" / "val_loss". Lines that
// are not JSON objects are skipped, as a run killed mid-write can leave one.
void plot_training_log(const std::string& log_jsonl, const std::string& png_path);

}  // namespace qkv
