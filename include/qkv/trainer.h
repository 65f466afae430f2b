// qkv/trainer.h: `qkv train`'s loop: data, batches, evaluation, logging,
// checkpoints and resuming.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "qkv/optim.h"
#include "qkv/gpt.h"

namespace qkv {

struct TrainOptions {
  std::string text_path, out_dir;
  GPTConfig model;  // vocab is taken from the text
  int64_t batch = 12, iters = 2000, warmup = 100;
  int64_t eval_interval = 250, eval_iters = 20, log_interval = 10;
  double lr = 1e-3, min_lr = 1e-4;
  AdamWConfig adam;
  uint64_t seed = 1337;
  int threads = 0;  // 0 = all cores
  Kernel kernel = Kernel::automatic;
  bool resume = false;
  bool force = false;    // start afresh even where out_dir holds a trained run
  int64_t stop_at = -1;  // >= 0: stop once this iteration's checkpoint is written
  // When it points at a non-zero value (set by a signal handler, say), the
  // loop finishes the current step, writes a checkpoint for the next
  // iteration and returns with TrainResult::interrupted.
  const std::atomic<int>* stop_requested = nullptr;

  bool progress_bar = false;  // redraw one line on stderr instead of log lines
  uint64_t text_hash = 0;     // set by train(): the text's fingerprint

  // What a resumed run must share with the original (not paths or threads).
  std::string to_json() const;
  static TrainOptions from_json(const std::string& json, const std::string& name_for_errors);
};

struct TrainResult {
  int64_t iters_run = 0;
  double final_train_loss = 0.0;  // estimated on eval_iters batches
  double final_val_loss = 0.0;
  bool interrupted = false;  // stopped by stop_requested
  int64_t next_iter = 0;     // where --resume continues from the last checkpoint
};

// Trains and writes DIR/{model.safetensors, config.json, vocab.json,
// train_state.safetensors, log.jsonl, loss.png}. Progress goes to stdout
// (log lines) or stderr (the bar). Throws qkv::Error on bad input.
//
// One writer per directory: out_dir/.qkv-train.lock is held (flock) for the
// whole run, and a second train() on the same directory is a qkv::Error.
// Without resume or force, a directory that already holds a checkpoint is
// refused rather than overwritten.
//
// Crash safety: train_state.safetensors is the checkpoint's commit record
// and holds everything --resume reads (weights, AdamW's moments, the
// iteration, the options) in one file written atomically, after the model
// files. A kill at any moment leaves the last committed resume point whole;
// model.safetensors may be one checkpoint newer, which sampling does not mind.
TrainResult train(const TrainOptions& opts);

}  // namespace qkv
