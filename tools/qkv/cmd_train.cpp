// qkv train: a small GPT on your own text (nanoGPT's recipe by default).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "field_flags.h"
#include "support/model_size.h"
#include "support/peak.h"
#include "support/plot.h"
#include "qkv/runtime.h"
#include "qkv/trainer.h"
#ifdef QKV_HAVE_MPI
#include "data_parallel.h"
#endif

namespace qkv::cli {
namespace {

struct TrainArgs {
  TrainOptions o;
  std::string kernel = "auto";
  std::string dtype = "float32";
  bool no_progress = false;
  CLI::App* cmd = nullptr;  // to tell the options given from the defaults
};

std::string format_clock(double seconds) {
  char buf[32];
  const int s = static_cast<int>(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d", s / 60, s % 60);
  return buf;
}

// What the run will train, before it starts: the model's size and cost
// (qkv size's numbers) and a step-time estimate from this machine's
// measured FMA peak.
void print_summary(const TrainOptions& o, const TrainProgress& p) {
  GPTConfig cfg = o.model;
  cfg.vocab = p.vocab;
  const ModelSize size = model_size(shape_of(cfg));
  // A step: forward + backward = 3 forwards of batch x context tokens.
  const double step_flops = 3.0 * size.flops_per_token * static_cast<double>(o.batch * cfg.context);
  const int threads = o.threads > 0 ? o.threads : default_threads();
  const double peak = measure_fma_gflops(active_isa(), threads, 0.05) * 1e9;
  // What the nanoGPT recipe reaches here (README, training figures): 60% of
  // the float32 FMA peak in float32; bf16 steps on AVX512-BF16 take ~2/3 of
  // that time (elsewhere bf16 widens to float32 and is no faster).
  const bool fast_bf16 = o.dtype == DType::bf16 && active_isa() >= Isa::avx512bf16;
  const double fraction = fast_bf16 ? 0.9 : 0.6;
  const double step_ms = step_flops / (fraction * peak) * 1e3;
  std::printf("model: %lld parameters (%d layers, %lld heads / %lld kv, embd %lld, context %lld%s), "
              "vocabulary %lld\n",
              static_cast<long long>(p.params), static_cast<int>(cfg.layers),
              static_cast<long long>(cfg.heads), static_cast<long long>(cfg.kv_heads),
              static_cast<long long>(cfg.embd), static_cast<long long>(cfg.context),
              cfg.rope ? ", RoPE" : "", static_cast<long long>(p.vocab));
  std::printf("data: %lld tokens (90%% train, 10%% validation); %lld tokens per step\n",
              static_cast<long long>(p.text_tokens), static_cast<long long>(o.batch * cfg.context));
  if (o.dtype == DType::bf16)
    std::printf("precision: bf16 mixed precision (Linear layers and attention on bf16 operands, "
                "float32 sums, weights and optimiser state)%s\n",
                fast_bf16 ? "" : "; without the AVX512-BF16 path (not on this CPU, or QKV_ISA) it widens to float32 and is no faster");
  std::printf("cost: %.2f GFLOP per step, about %.0f ms each on %d threads (%.0f%% of the measured "
              "%.0f GFLOP/s float32 peak); %lld steps%s\n",
              step_flops / 1e9, step_ms, threads, fraction * 100, peak / 1e9, static_cast<long long>(o.iters),
              p.first_iter > 0 ? (", resuming at " + std::to_string(p.first_iter)).c_str() : "");
  std::fflush(stdout);
}

// The command's view of the loop: a bar redrawn on stderr (a terminal), or
// one line per logged step and per evaluation on stdout. Both name a step by
// the same number, its 0-based index.
std::function<void(const TrainProgress&)> progress_printer(const TrainOptions& o, bool bar) {
  return [&o, bar](const TrainProgress& p) {
    using E = TrainProgress::Event;
    switch (p.event) {
      case E::start:
        print_summary(o, p);
        break;
      case E::step:
        if (bar) {
          constexpr int kWidth = 24;
          const int fill = static_cast<int>(kWidth * (p.iter + 1) / std::max<int64_t>(p.iters, 1));
          std::string b(fill, '=');
          b.resize(kWidth, ' ');
          char val[32] = "";
          if (!std::isnan(p.val_loss)) std::snprintf(val, sizeof val, " val %.4f", p.val_loss);
          std::fprintf(stderr, "\r[%s] iter %lld/%lld loss %.4f%s | %.1fk tok/s | ETA %s   ", b.c_str(),
                       static_cast<long long>(p.iter), static_cast<long long>(p.iters), p.loss, val,
                       p.tokens_per_s / 1000.0, format_clock(p.eta_s).c_str());
          std::fflush(stderr);
        } else if (p.logged) {
          std::printf("iter %lld/%lld loss %.4f lr %.2e %.1fk tok/s %.1fs\n",
                      static_cast<long long>(p.iter), static_cast<long long>(p.iters), p.loss, p.lr,
                      p.tokens_per_s / 1000.0, p.elapsed_s);
          std::fflush(stdout);  // log lines appear as they happen, also in a pipe
        }
        break;
      case E::eval:
        if (bar) break;
        std::printf("iter %lld: train %.4f, val %.4f", static_cast<long long>(p.iter), p.loss, p.val_loss);
        if (!std::isnan(p.val_loss_full)) std::printf(" (whole split %.4f)", p.val_loss_full);
        std::printf(" (checkpoint saved)\n");
        std::fflush(stdout);
        break;
      case E::done:
        if (bar) std::fprintf(stderr, "\n");
        // The whole split is scored at the last iteration (or each evaluation
        // with --eval-full); a run stopped before it has no such figure.
        std::printf("done: train loss %.4f, val loss %.4f", p.loss, p.val_loss);
        if (!std::isnan(p.val_loss_full)) std::printf(", on the whole validation split %.4f", p.val_loss_full);
        std::printf("; model in %s\n", o.out_dir.c_str());
        break;
    }
  };
}

// --resume keeps the checkpoint's options: one given again with another
// value would be silently ignored, so it is refused, named.
void refuse_conflicts_with_checkpoint(const TrainArgs& a) {
  const TrainOptions saved = saved_train_options(a.o.out_dir);
  const TrainOptions& o = a.o;
  std::string conflicts;
  auto check = [&](const char* flag, auto given, auto kept) {
    if (a.cmd->count(flag) > 0 && given != kept)
      conflicts += std::string(conflicts.empty() ? "" : ", ") + flag + " " + std::to_string(given) +
                   " (checkpoint: " + std::to_string(kept) + ")";
  };
  check("--layers", o.model.layers, saved.model.layers);
  check("--heads", o.model.heads, saved.model.heads);
  check("--kv-heads", o.model.kv_heads, saved.model.kv_heads);
  check("--embd", o.model.embd, saved.model.embd);
  check("--context", o.model.context, saved.model.context);
  check("--rope", o.model.rope, saved.model.rope);
  check("--bias", o.model.bias, saved.model.bias);
  check("--batch", o.batch, saved.batch);
  check("--iters", o.iters, saved.iters);
  check("--lr", o.lr, saved.lr);
  check("--min-lr", o.min_lr, saved.min_lr);
  check("--warmup", o.warmup, saved.warmup);
  check("--weight-decay", o.adam.weight_decay, saved.adam.weight_decay);
  check("--grad-clip", o.adam.grad_clip, saved.adam.grad_clip);
  check("--eval-interval", o.eval_interval, saved.eval_interval);
  check("--eval-iters", o.eval_iters, saved.eval_iters);
  check("--log-interval", o.log_interval, saved.log_interval);
  check("--seed", o.seed, saved.seed);
  if (a.cmd->count("--dtype") > 0 && o.dtype != saved.dtype)
    conflicts += std::string(conflicts.empty() ? "" : ", ") + "--dtype " + a.dtype +
                 " (checkpoint: " + (saved.dtype == DType::bf16 ? "bf16" : "float32") + ")";
  if (!conflicts.empty())
    throw UsageError("--resume: the checkpoint in '" + o.out_dir +
                     "' continues with its own options; these differ: " + conflicts +
                     ". Drop them, or start afresh with --force");
}

// Ctrl-C (SIGINT) or SIGTERM: recorded, never handled in the middle of a
// computation. Both are blocked in every thread (here, before any thread
// starts, so OpenMP's threads inherit the mask) and one watcher thread takes
// them with sigwait; the training loop reads the flag between steps, saves a
// checkpoint and returns. An asynchronous handler instead interrupted the
// kernels at any instruction, and under load such runs now and then ended
// in heap corruption ("corrupted size vs. prev_size", about 1 in 30 runs
// with the machine loaded, never without the signal); taken synchronously,
// none in 120 such runs. After the first signal the watcher restores the
// default action and unblocks both in itself, so a second Ctrl-C ends the
// process at once, which is safe too: every checkpoint is written atomically.
std::atomic<int> g_stop_signal{0};

void catch_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return;
    g_stop_signal.store(sig);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    for (;;) pause();  // a second signal ends the process here
  }).detach();
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

// The library's field for each of the command's flags: its checks name the
// field, the command shows the flag.
const FieldFlags kTrainFlags = {
    {"text_path", "--text"}, {"out_dir", "--out"}, {"layers", "--layers"}, {"heads", "--heads"},
    {"kv_heads", "--kv-heads"}, {"embd", "--embd"}, {"context", "--context"}, {"rope", "--rope"},
    {"bias", "--bias"}, {"batch", "--batch"}, {"iters", "--iters"}, {"lr", "--lr"},
    {"min_lr", "--min-lr"}, {"warmup", "--warmup"}, {"weight_decay", "--weight-decay"},
    {"grad_clip", "--grad-clip"}, {"eval_interval", "--eval-interval"},
    {"eval_iters", "--eval-iters"}, {"log_interval", "--log-interval"}, {"seed", "--seed"},
    {"threads", "--threads"}, {"kernel", "--kernel"}, {"dtype", "--dtype"}, {"resume", "--resume"},
    {"force", "--force"}, {"stop_at", "--stop-at"}, {"eval_full", "--eval-full"}};

int run_train(TrainArgs& a) {
  TrainOptions& o = a.o;
  // The library takes any warmup < 0 as its default; on the command line the
  // default is not giving the flag, so a negative value is a typo.
  if (a.cmd->count("--warmup") > 0 && o.warmup < 0)
    throw UsageError("--warmup: expected an integer >= 0, found " + std::to_string(o.warmup));
  if (o.model.kv_heads == 0) o.model.kv_heads = o.model.heads;
  o.dtype = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  o.kernel = as_usage(kTrainFlags, [&] { return parse_kernel(a.kernel); });
  as_usage(kTrainFlags, [&] { o.validate(); });
  check_train_memory(o);
  if (o.resume) in_flags(kTrainFlags, [&] { refuse_conflicts_with_checkpoint(a); });
  // A resumed run goes on with its checkpoint's options: the summary and the
  // progress lines show those, not this command line's defaults.
  TrainOptions shown = o;
  if (o.resume) {
    const TrainOptions saved = saved_train_options(o.out_dir);
    shown.model = saved.model, shown.batch = saved.batch, shown.iters = saved.iters;
    shown.dtype = saved.dtype;
  }
  o.on_progress = progress_printer(shown, !a.no_progress && isatty(STDERR_FILENO));
  catch_stop_signals();
  o.stop_requested = &g_stop_signal;
#ifdef QKV_HAVE_MPI
  // Under mpirun (or srun) with more than one rank: data parallel.
  if (launched_by_mpi()) return run_data_parallel(o, g_stop_signal, kTrainFlags);
#endif
  const TrainResult r = in_flags(kTrainFlags, [&] { return train(o); });
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
  cmd->add_option("--warmup", o.warmup, "linear warm-up steps (default: min(100, iters / 10))");
  cmd->add_option("--weight-decay", o.adam.weight_decay, "AdamW decay on matrices")->capture_default_str();
  cmd->add_option("--grad-clip", o.adam.grad_clip, "clip the gradient norm (0 = off)")->capture_default_str();
  cmd->add_option("--eval-interval", o.eval_interval, "evaluate and checkpoint every N steps")->capture_default_str();
  cmd->add_option("--eval-iters", o.eval_iters, "batches per loss estimate")->capture_default_str();
  cmd->add_option("--log-interval", o.log_interval, "log a line every N steps")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed for the initial weights and the batches")->capture_default_str();
  cmd->add_option("--threads", o.threads, "threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kernel", a->kernel, "attention kernel: reference, fast or auto")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype,
                  "float32, or bf16: mixed precision (Linear layers and attention on operands "
                  "rounded to bfloat16 with float32 sums; float32 weights, AdamW state, "
                  "LayerNorm, GELU and loss)")
      ->check(CLI::IsMember({"float32", "bf16"}))
      ->capture_default_str();
  CLI::Option* resume =
      cmd->add_flag("--resume", o.resume, "continue from the checkpoint in --out, with its options");
  cmd->add_flag("--force", o.force,
                "start afresh even if --out holds a trained run (its checkpoint is overwritten) or "
                "files qkv did not write (those of the names a run writes are replaced)")
      ->excludes(resume);  // continuing and starting over at once: one of them would be ignored
  cmd->add_option("--stop-at", o.stop_at,
                  "stop after the checkpoint of this iteration (a multiple of --eval-interval), "
                  "to continue later with --resume");
  cmd->add_flag("--no-progress", a->no_progress, "log lines instead of a progress bar on a terminal");
  cmd->add_flag("--eval-full", o.eval_full,
                "evaluate on the whole validation split at every evaluation (always done at the end)");
  a->cmd = cmd;
  // Whole numbers here; their ranges are the library's checks (TrainOptions,
  // GPTConfig), worded with the flags. It reads a negative stop_at as none:
  // given here, that is a mistake.
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();
  check_counts<int64_t>(cmd, {{"--layers", kAny, "a number of blocks >= 1"},
                              {"--heads", kAny, "a number of heads >= 1"},
                              {"--kv-heads", kAny, "a number of key/value heads dividing --heads"},
                              {"--embd", kAny, "a width >= 1"},
                              {"--context", kAny, "a number of tokens >= 1"},
                              {"--batch", kAny, "a number of sequences >= 1"},
                              {"--iters", kAny, "a number of steps >= 1"},
                              {"--warmup", kAny, "a number of steps >= 0"},
                              {"--eval-interval", kAny, "a number of steps >= 1"},
                              {"--eval-iters", kAny, "a number of batches >= 1"},
                              {"--log-interval", kAny, "a number of steps >= 1"},
                              {"--stop-at", 0, "an iteration >= 0, a multiple of --eval-interval"}});
  check_integers<uint64_t>(cmd, {"--seed"});
  check_integers<int>(cmd, {"--threads"});
  // The run's own files in --out are the library's to guard (for Python
  // too); loss.png is the command's.
  path_options(cmd, {.reads = {"--text"}, .write_dirs = {{"--out", {"loss.png"}}}});
  return [a] { return run_train(*a); };
}

}  // namespace qkv::cli
