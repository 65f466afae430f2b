// qkv train: a small GPT on your own text (nanoGPT's recipe by default).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "qkv/plot.h"
#include "qkv/trainer.h"

namespace qkv::cli {
namespace {

struct TrainArgs {
  TrainOptions o;
  std::string kernel = "auto";
  bool no_progress = false;
};

// Ctrl-C (SIGINT) or SIGTERM: the handler only records the signal; the
// training loop finishes its step, saves a checkpoint and returns. The
// handler is reset by its first call (SA_RESETHAND), so a second Ctrl-C
// kills at once, which is safe too: every checkpoint file is atomic.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need a lock-free flag");

extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// A lower bound of what training holds in float32 (the vocabulary is not
// known yet, so it counts as one token): weights, gradients and AdamW's two
// moments, 10 + 2·Hkv/H times C² per layer, and about 19 activations of
// [B, T, C] per layer. In double, so sizes whose product overflows are
// refused too rather than wrapped.
//
// The text counts too: read once (its size in bytes) and held as token ids of
// one, two or four bytes per character (see trainer.cpp), at most the text's
// size again for up to 256 distinct characters; 2x its size is counted.
void check_train_memory(const TrainOptions& o) {
  const double L = static_cast<double>(o.model.layers), C = static_cast<double>(o.model.embd);
  const double T = static_cast<double>(o.model.context), B = static_cast<double>(o.batch);
  const double kv = static_cast<double>(o.model.kv_heads) / static_cast<double>(o.model.heads);
  const double params = L * C * C * (10.0 + 2.0 * kv) + T * C;
  const double floats = 4.0 * params + 19.0 * L * B * T * C;
  std::error_code ec;
  const auto text_bytes = std::filesystem::file_size(o.text_path, ec);
  const double text = ec ? 0.0 : 2.0 * static_cast<double>(text_bytes);
  const std::string refused = memory_shortfall(
      "--layers " + std::to_string(o.model.layers) + " --embd " + std::to_string(o.model.embd) +
          " --context " + std::to_string(o.model.context) + " --batch " + std::to_string(o.batch) +
          ": the weights, optimiser state and activations",
      4.0 * floats + text);
  if (!refused.empty()) throw UsageError(refused);
}

int run_train(TrainArgs& a) {
  TrainOptions& o = a.o;
  auto positive = [](const char* flag, int64_t v) {
    if (v < 1) throw UsageError(std::string(flag) + ": expected a positive integer, found " + std::to_string(v));
  };
  positive("--layers", o.model.layers);
  positive("--heads", o.model.heads);
  positive("--embd", o.model.embd);
  positive("--context", o.model.context);
  positive("--batch", o.batch);
  positive("--iters", o.iters);
  positive("--eval-interval", o.eval_interval);
  positive("--eval-iters", o.eval_iters);
  positive("--log-interval", o.log_interval);
  if (o.warmup < 0) throw UsageError("--warmup: expected an integer >= 0, found " + std::to_string(o.warmup));
  if (o.model.kv_heads == 0) o.model.kv_heads = o.model.heads;
  if (o.model.kv_heads < 1 || o.model.heads % o.model.kv_heads != 0)
    throw UsageError("--kv-heads: expected a divisor of --heads " + std::to_string(o.model.heads) +
                     ", found " + std::to_string(o.model.kv_heads));
  if (o.model.embd % o.model.heads != 0)
    throw UsageError("--heads: expected a divisor of --embd " + std::to_string(o.model.embd) +
                     ", found " + std::to_string(o.model.heads));
  if (!(o.lr > 0.0) || !(o.min_lr >= 0.0) || o.min_lr > o.lr || !std::isfinite(o.lr))
    throw UsageError("--lr, --min-lr: expected 0 <= min-lr <= lr and 0 < lr < inf, found lr " +
                     std::to_string(o.lr) + ", min-lr " + std::to_string(o.min_lr));
  // Non-finite values would only surface as "training diverged" later.
  auto finite_at_least_0 = [](const char* flag, double v) {
    if (!std::isfinite(v) || v < 0.0)
      throw UsageError(std::string(flag) + ": expected a finite number >= 0, found " + std::to_string(v));
  };
  finite_at_least_0("--weight-decay", o.adam.weight_decay);
  finite_at_least_0("--grad-clip", o.adam.grad_clip);
  if (o.model.rope && (o.model.embd / o.model.heads) % 2 != 0)
    throw UsageError("--rope: expected an even head dim, found --embd / --heads = " +
                     std::to_string(o.model.embd / o.model.heads));
  check_threads("--threads", o.threads);
  if (o.stop_at >= 0 && o.stop_at % o.eval_interval != 0)
    throw UsageError("--stop-at: expected a multiple of --eval-interval " +
                     std::to_string(o.eval_interval) + ", found " + std::to_string(o.stop_at));
  check_train_memory(o);
  o.kernel = *parse_kernel(a.kernel);
  o.progress_bar = !a.no_progress && isatty(STDERR_FILENO);
  catch_stop_signals();
  o.stop_requested = &g_stop_signal;
  const TrainResult r = train(o);
  plot_training_log(o.out_dir + "/log.jsonl", o.out_dir + "/loss.png");
  if (!r.interrupted) return 0;
  std::fflush(stdout);
  std::fprintf(stderr, "qkv train: interrupted: checkpoint saved at iteration %lld; continue with --resume\n",
               static_cast<long long>(r.next_iter));
  return 128 + g_stop_signal.load();  // the shell's code for death by that signal: 130 for Ctrl-C
}

}  // namespace

Runner add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  TrainOptions& o = a->o;
  o.model.kv_heads = 0;  // 0: same as --heads
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a small GPT on your own text and save it in --out (model.safetensors, config.json,\n"
      "vocab.json, log.jsonl, loss.png). Defaults: nanoGPT's CPU recipe for tiny Shakespeare.");
  cmd->add_option("--text", o.text_path, "UTF-8 text to learn (90% train, 10% validation)")->required();
  cmd->add_option("--out", o.out_dir, "directory for checkpoints, log and plot")->required();
  cmd->add_option("--layers", o.model.layers, "transformer blocks")->capture_default_str();
  cmd->add_option("--heads", o.model.heads, "attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", o.model.kv_heads, "key/value heads (GQA; default: --heads)");
  cmd->add_option("--embd", o.model.embd, "model width C")->capture_default_str();
  cmd->add_option("--context", o.model.context, "context length T (block size)")->capture_default_str();
  cmd->add_flag("--rope", o.model.rope, "RoPE on queries and keys instead of learned positions");
  cmd->add_flag("--bias", o.model.bias, "biases in Linear and LayerNorm layers (nanoGPT's default: none)");
  cmd->add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  cmd->add_option("--iters", o.iters, "optimisation steps")->capture_default_str();
  cmd->add_option("--lr", o.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  cmd->add_option("--weight-decay", o.adam.weight_decay, "AdamW decay on matrices")->capture_default_str();
  cmd->add_option("--grad-clip", o.adam.grad_clip, "clip the gradient norm (0 = off)")->capture_default_str();
  cmd->add_option("--eval-interval", o.eval_interval, "evaluate and checkpoint every N steps")->capture_default_str();
  cmd->add_option("--eval-iters", o.eval_iters, "batches per loss estimate")->capture_default_str();
  cmd->add_option("--log-interval", o.log_interval, "log a line every N steps")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for the initial weights and the batches")->capture_default_str();
  cmd->add_option("--threads", o.threads, "threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kernel", a->kernel, "attention kernel: reference, fast or auto")
      ->check(CLI::IsMember({"reference", "fast", "auto"}))
      ->capture_default_str();
  cmd->add_flag("--resume", o.resume, "continue from the checkpoint in --out, with its options");
  cmd->add_flag("--force", o.force,
                "start afresh even if --out holds a trained run (its checkpoint is overwritten)");
  cmd->add_option("--stop-at", o.stop_at,
                  "stop after the checkpoint of this iteration (a multiple of --eval-interval), "
                  "to continue later with --resume");
  cmd->add_flag("--no-progress", a->no_progress, "log lines instead of a progress bar on a terminal");
  check_integers<int64_t>(cmd, {"--layers", "--heads", "--kv-heads", "--embd", "--context",
                                "--batch", "--iters", "--warmup", "--eval-interval", "--eval-iters",
                                "--log-interval", "--stop-at"});
  check_integers<uint64_t>(cmd, {"--seed"});
  check_integers<int>(cmd, {"--threads"});
  return [a] { return run_train(*a); };
}

}  // namespace qkv::cli
