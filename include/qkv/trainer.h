/// @file
/// qkv/trainer.h: the training loop: data, batches, evaluation, logging,
/// checkpoints and resuming. It prints nothing and names no command-line
/// flag: progress goes to a callback, errors are qkv::Error.
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

/// One report from the loop, for whoever shows progress (the command draws a
/// bar or prints lines; the Python package calls back).
struct TrainProgress {
  /// What happened; which fields are set depends on it (each says so).
  enum class Event {
    start,  ///< before the first step: what will be trained
    step,   ///< after each optimizer step
    eval,   ///< after each evaluation (a checkpoint was written)
    done,   ///< after the last step and the final evaluation
  };
  Event event = Event::start;  ///< what this report is about
  int64_t iter = 0;    ///< step: the step just taken (0-based); eval/done: steps so far
  int64_t iters = 0;   ///< the run's last iteration
  double loss = NAN;   ///< step: this batch's loss; eval/done: the train estimate
  double val_loss = NAN;       ///< eval/done: the validation loss
  double val_loss_full = NAN;  ///< done (and eval with eval_full): the whole validation split
  double lr = NAN;            ///< step: the learning rate of this step
  double grad_norm = NAN;     ///< step: the gradient's norm before clipping
  double tokens_per_s = NAN;  ///< step: training throughput so far
  double elapsed_s = 0.0;  ///< since the run began, resumes included
  double eta_s = NAN;      ///< step: estimated time to the end
  bool logged = false;     ///< step: this step's line went to log.jsonl (log_interval)
  int64_t params = 0;       ///< start: the model's parameter count
  int64_t vocab = 0;        ///< start: the vocabulary, from the text
  int64_t text_tokens = 0;  ///< start: the text's length in tokens
  int64_t first_iter = 0;   ///< start: the first step to run (> 0 when resuming)
};

/// Everything train() needs: the text, the run directory, the model's sizes
/// and the recipe. validate() checks it; its errors name these fields.
struct QKV_API TrainOptions {
  std::string text_path;  ///< UTF-8 text to learn (90% train, 10% validation)
  std::string out_dir;    ///< directory for checkpoints and log.jsonl
  GPTConfig model;  ///< vocab is taken from the text
  int64_t batch = 12;    ///< sequences per step (over all ranks)
  int64_t iters = 2000;  ///< optimisation steps, at least 1
  int64_t warmup = -1;  ///< < 0: min(100, iters / 10)
  int64_t eval_interval = 250;  ///< evaluate and checkpoint every this many steps
  int64_t eval_iters = 20;      ///< batches per loss estimate
  int64_t log_interval = 10;    ///< a log.jsonl line every this many steps
  bool eval_full = false;  ///< evaluate on the whole validation split every time
  double lr = 1e-3;      ///< peak learning rate, after the warm-up
  double min_lr = 1e-4;  ///< learning rate at the end of the cosine decay, in [0, lr]
  AdamWConfig adam;      ///< the optimiser's betas, decay and clipping
  uint64_t seed = 1337;  ///< seed for the initial weights and the batches
  int threads = 0;  ///< for everything the run computes; 0 = all cores
  Kernel kernel = Kernel::automatic;  ///< the attention kernel
  /// The model's compute dtype (GPT::set_compute_dtype): float32, or bf16 for
  /// mixed precision (bf16 GEMMs and attention; float32 master weights,
  /// AdamW state, LayerNorm, GELU and loss). Saved: a resume keeps it.
  DType dtype = DType::f32;
  bool resume = false;   ///< continue from out_dir's checkpoint, with its options
  bool force = false;    ///< start afresh even where out_dir holds a trained run
  int64_t stop_at = -1;  ///< >= 0: stop once this iteration's checkpoint is written
  /// When it points at a non-zero value (set by a signal handler, say), the
  /// loop finishes the current step, writes a checkpoint for the next
  /// iteration and returns with TrainResult::interrupted.
  const std::atomic<int>* stop_requested = nullptr;
  std::function<void(const TrainProgress&)> on_progress;  ///< null: silent

  /// Data parallelism (qkv/data_parallel.h fills these): this process is
  /// rank `rank` of `ranks`, takes rows [rank B/P, (rank + 1) B/P) of every
  /// global batch of `batch` rows, and the ranks sum their gradients and
  /// losses with the two functions before every step. Rank 0 alone writes
  /// the directory and reports progress.
  int rank = 0;
  int ranks = 1;  ///< processes in the run (see rank)
  /// Sums `n` values over the ranks, in place (needed when ranks > 1).
  std::function<void(float* values, int64_t n)> sum_over_ranks;
  /// Sums one value over the ranks (needed when ranks > 1).
  std::function<double(double)> sum_scalar_over_ranks;

  uint64_t text_hash = 0;  ///< set by train(): the text's fingerprint

  /// Throws qkv::Error naming the first field out of range (sizes >= 1,
  /// rates finite, batch divisible by ranks, ...); train() calls it.
  void validate() const;
  /// What a resumed run must share with the original (not paths or threads).
  std::string to_json() const;
  /// Reads to_json's text back; errors name `name_for_errors` (the file).
  static TrainOptions from_json(const std::string& json, const std::string& name_for_errors);
};

/// What a train() call did.
struct TrainResult {
  int64_t iters_run = 0;          ///< steps taken by this call
  double final_train_loss = 0.0;  ///< estimated on eval_iters batches
  double final_val_loss = 0.0;    ///< estimated on eval_iters batches
  double final_val_loss_full = NAN;  ///< the whole validation split (not when interrupted)
  bool interrupted = false;  ///< stopped by stop_requested
  int64_t next_iter = 0;     ///< where resume continues from the last checkpoint
};

/// The options a checkpoint in `out_dir` was trained with (what resume
/// continues), for a caller that wants to compare before resuming. Throws
/// qkv::Error when there is no checkpoint.
QKV_API TrainOptions saved_train_options(const std::string& out_dir);

/// Trains and writes DIR/{model.safetensors, config.json, vocab.json,
/// train_state.safetensors, log.jsonl}. Throws qkv::Error on bad input.
///
/// One writer per directory: out_dir/.qkv-train.lock is held (flock) for the
/// whole run, and a second train() on the same directory is a qkv::Error.
/// Without resume or force, a directory that already holds a checkpoint is
/// refused rather than overwritten.
///
/// Crash safety: train_state.safetensors is the checkpoint's commit record
/// and holds everything resume reads (weights, AdamW's moments, the
/// iteration, the options) in one file written atomically, after the model
/// files. A kill at any moment leaves the last committed resume point whole;
/// model.safetensors may be one checkpoint newer, which sampling does not mind.
QKV_API TrainResult train(const TrainOptions& opts);

}  // namespace qkv
