// qkv/trainer.h: the training loop: data, batches, evaluation, logging,
// checkpoints and resuming. It prints nothing and names no command-line
// flag: progress goes to a callback, errors are qkv::Error.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "qkv/export.h"
#include "qkv/gpt.h"
#include "qkv/optim.h"

namespace qkv {

// One report from the loop, for whoever shows progress (the command draws a
// bar or prints lines; the Python package calls back).
struct TrainProgress {
  enum class Event {
    start,  // before the first step: what will be trained
    step,   // after each optimizer step
    eval,   // after each evaluation (a checkpoint was written)
    done,   // after the last step and the final evaluation
  };
  Event event = Event::start;
  int64_t iter = 0;    // step: the step just taken (0-based); eval/done: steps so far
  int64_t iters = 0;   // the run's last iteration
  double loss = NAN;   // step: this batch's loss; eval/done: the train estimate
  double val_loss = NAN;       // eval/done: the validation loss
  double val_loss_full = NAN;  // done (and eval with eval_full): the whole validation split
  double lr = NAN, grad_norm = NAN, tokens_per_s = NAN;
  double elapsed_s = 0.0;  // since the run began, resumes included
  double eta_s = NAN;      // step: estimated time to the end
  bool logged = false;     // step: this step's line went to log.jsonl (log_interval)
  // start: the model and the data.
  int64_t params = 0, vocab = 0, text_tokens = 0, first_iter = 0;
};

struct QKV_API TrainOptions {
  std::string text_path, out_dir;
  GPTConfig model;  // vocab is taken from the text
  int64_t batch = 12, iters = 2000;
  int64_t warmup = -1;  // < 0: min(100, iters / 10)
  int64_t eval_interval = 250, eval_iters = 20, log_interval = 10;
  bool eval_full = false;  // evaluate on the whole validation split every time
  double lr = 1e-3, min_lr = 1e-4;
  AdamWConfig adam;
  uint64_t seed = 1337;
  int threads = 0;  // for everything the run computes; 0 = all cores
  Kernel kernel = Kernel::automatic;
  // The model's compute dtype (GPT::set_compute_dtype): float32, or bf16 for
  // mixed precision (bf16 GEMMs and attention; float32 master weights,
  // AdamW state, LayerNorm, GELU and loss). Saved: a resume keeps it.
  DType dtype = DType::f32;
  bool resume = false;
  bool force = false;    // start afresh even where out_dir holds a trained run
  int64_t stop_at = -1;  // >= 0: stop once this iteration's checkpoint is written
  // When it points at a non-zero value (set by a signal handler, say), the
  // loop finishes the current step, writes a checkpoint for the next
  // iteration and returns with TrainResult::interrupted.
  const std::atomic<int>* stop_requested = nullptr;
  std::function<void(const TrainProgress&)> on_progress;  // null: silent

  // Data parallelism (qkv/data_parallel.h fills these): this process is
  // rank `rank` of `ranks`, takes rows [rank B/P, (rank + 1) B/P) of every
  // global batch of `batch` rows, and the ranks sum their gradients and
  // losses with the two functions before every step. Rank 0 alone writes
  // the directory and reports progress.
  int rank = 0, ranks = 1;
  std::function<void(float* values, int64_t n)> sum_over_ranks;
  std::function<double(double)> sum_scalar_over_ranks;

  uint64_t text_hash = 0;  // set by train(): the text's fingerprint

  // Throws qkv::Error naming the first field out of range (sizes >= 1,
  // rates finite, batch divisible by ranks, ...); train() calls it.
  void validate() const;
  // What a resumed run must share with the original (not paths or threads).
  std::string to_json() const;
  static TrainOptions from_json(const std::string& json, const std::string& name_for_errors);
};

struct TrainResult {
  int64_t iters_run = 0;
  double final_train_loss = 0.0;  // estimated on eval_iters batches
  double final_val_loss = 0.0;
  double final_val_loss_full = NAN;  // the whole validation split (not when interrupted)
  bool interrupted = false;  // stopped by stop_requested
  int64_t next_iter = 0;     // where --resume continues from the last checkpoint
};

// The options a checkpoint in `out_dir` was trained with (what --resume
// continues), for a caller that wants to compare before resuming. Throws
// qkv::Error when there is no checkpoint.
QKV_API TrainOptions saved_train_options(const std::string& out_dir);

// Trains and writes DIR/{model.safetensors, config.json, vocab.json,
// train_state.safetensors, log.jsonl}. Throws qkv::Error on bad input.
//
// One writer per directory: out_dir/.qkv-train.lock is held (flock) for the
// whole run, and a second train() on the same directory is a qkv::Error.
// Without resume or force, a directory that already holds a checkpoint is
// refused rather than overwritten.
//
// Crash safety: train_state.safetensors is the checkpoint's commit record
// and holds everything resume reads (weights, AdamW's moments, the
// iteration, the options) in one file written atomically, after the model
// files. A kill at any moment leaves the last committed resume point whole;
// model.safetensors may be one checkpoint newer, which sampling does not mind.
QKV_API TrainResult train(const TrainOptions& opts);

}  // namespace qkv
