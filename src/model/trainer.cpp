// trainer.cpp: the training loop (qkv/trainer.h). The data lives in
// train/train_data, the run directory's lock and log in train/run_dir.
#include "qkv/trainer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/train/run_dir.h"
#include "model/train/train_data.h"
#include "qkv/checkpoint.h"
#include "qkv/runtime.h"

namespace qkv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace train_data;

// Everything one rank needs to evaluate and step: its share of a batch and
// the sums over ranks (identity for one process).
struct Shard {
  const TrainOptions& o;
  int64_t rows, row0;  // this rank's rows of a global batch
  std::vector<int32_t> x, y;

  explicit Shard(const TrainOptions& opts)
      : o(opts), rows(opts.batch / opts.ranks), row0(opts.rank * rows),
        x(static_cast<size_t>(rows * opts.model.context)), y(x.size()) {}
  double sum(double v) const { return o.ranks > 1 ? o.sum_scalar_over_ranks(v) : v; }
};

// Mean loss over eval_iters fixed batches of one split (every rank its rows).
double estimate_loss(GPT& model, const Part& data, Shard& sh, uint64_t stream) {
  const int64_t T = sh.o.model.context;
  double sum = 0.0;
  for (int64_t k = 0; k < sh.o.eval_iters; ++k) {
    NumpyGenerator rng = batch_rng(sh.o.seed, stream, static_cast<uint64_t>(k));
    get_batch(data, sh.o.batch, T, rng, sh.row0, sh.rows, sh.x, sh.y);
    sum += model.forward(sh.x.data(), sh.y.data(), sh.rows, T);
  }
  return sh.sum(sum) / static_cast<double>(sh.o.ranks * sh.o.eval_iters);
}

// Mean loss over every position of a split, deterministic: its consecutive
// windows of T + 1 ids in global batches of `batch` windows, each rank its
// rows of each batch.
double full_loss(GPT& model, const Part& data, Shard& sh) {
  const int64_t T = sh.o.model.context, B = sh.o.batch, windows = window_count(data, T);
  double sum = 0.0;  // of per-window mean losses
  for (int64_t first = 0; first < windows; first += B) {
    const int64_t n = get_windows(data, T, first + sh.row0, std::min(sh.rows, windows - first - sh.row0),
                                  sh.x, sh.y);
    if (n > 0) sum += model.forward(sh.x.data(), sh.y.data(), n, T) * static_cast<double>(n);
  }
  return sh.sum(sum) / static_cast<double>(windows);
}

}  // namespace

void TrainOptions::validate() const {
  // Each message names the field, never a command-line flag: the command
  // and the Python package present it with their own names.
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("train options: " + what);
  };
  auto at_least = [&](const char* field, int64_t v, int64_t min) {
    need(v >= min, std::string(field) + " must be at least " + std::to_string(min) + ", found " +
                       std::to_string(v));
  };
  auto shortest = [](double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  };
  need(!text_path.empty(), "text_path is empty");
  need(!out_dir.empty(), "out_dir is empty");
  need(!(resume && force), "resume cannot be combined with force (continue the run, or start it over)");
  at_least("batch", batch, 1);
  at_least("iters", iters, 1);
  at_least("eval_interval", eval_interval, 1);
  at_least("eval_iters", eval_iters, 1);
  at_least("log_interval", log_interval, 1);
  // On resume the checkpoint's eval_interval counts, not the one given: train() checks it there.
  need(stop_at < 0 || resume || stop_at % eval_interval == 0,
       "stop_at must be a multiple of eval_interval " + std::to_string(eval_interval) + " (a checkpoint "
       "is written there), found " + std::to_string(stop_at));
  need(std::isfinite(lr) && lr > 0, "lr must be a finite number > 0, found " + shortest(lr));
  need(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
       "min_lr must be in [0, lr " + shortest(lr) + "], found " + shortest(min_lr));
  need(std::isfinite(adam.beta1) && adam.beta1 >= 0 && adam.beta1 < 1,
       "beta1 must be in [0, 1), found " + shortest(adam.beta1));
  need(std::isfinite(adam.beta2) && adam.beta2 >= 0 && adam.beta2 < 1,
       "beta2 must be in [0, 1), found " + shortest(adam.beta2));
  need(std::isfinite(adam.weight_decay) && adam.weight_decay >= 0,
       "weight_decay must be a finite number >= 0, found " + shortest(adam.weight_decay));
  need(std::isfinite(adam.grad_clip) && adam.grad_clip >= 0,
       "grad_clip must be a finite number >= 0 (0 = off), found " + shortest(adam.grad_clip));
  need(dtype == DType::f32 || dtype == DType::bf16,
       std::string("dtype must be float32 or bfloat16, found ") + dtype_name(dtype));
  check_threads(threads);
  need(ranks >= 1 && rank >= 0 && rank < ranks, "rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  need(batch % ranks == 0, "batch must divide by the " + std::to_string(ranks) +
                               " ranks (each takes an equal share), found " + std::to_string(batch));
  need(ranks == 1 || (sum_over_ranks && sum_scalar_over_ranks),
       "more than one rank needs sum_over_ranks and sum_scalar_over_ranks");
  // The model's sizes, before any file is read: the vocabulary, which comes
  // from the text, is the one thing left unchecked here.
  GPTConfig m = model;
  m.vocab = 1;
  m.validate();
}

std::string TrainOptions::to_json() const {
  json j = {{"model", json::parse(config_to_json(model))},
            {"batch", batch},
            {"iters", iters},
            {"warmup", warmup},
            {"eval_interval", eval_interval},
            {"eval_iters", eval_iters},
            {"log_interval", log_interval},
            {"lr", lr},
            {"min_lr", min_lr},
            {"beta1", adam.beta1},
            {"beta2", adam.beta2},
            {"weight_decay", adam.weight_decay},
            {"grad_clip", adam.grad_clip},
            {"seed", seed},
            {"dtype", dtype_name(dtype)},
            {"text_hash", std::to_string(text_hash)}};
  return j.dump();
}

TrainOptions TrainOptions::from_json(const std::string& text, const std::string& name) {
  TrainOptions o;
  try {
    const json j = json::parse(text);
    o.model = config_from_json(j.at("model").dump(), name);
    o.batch = j.at("batch").get<int64_t>();
    o.iters = j.at("iters").get<int64_t>();
    o.warmup = j.at("warmup").get<int64_t>();
    o.eval_interval = j.at("eval_interval").get<int64_t>();
    o.eval_iters = j.at("eval_iters").get<int64_t>();
    o.log_interval = j.at("log_interval").get<int64_t>();
    o.lr = j.at("lr").get<double>();
    o.min_lr = j.at("min_lr").get<double>();
    o.adam.beta1 = j.at("beta1").get<double>();
    o.adam.beta2 = j.at("beta2").get<double>();
    o.adam.weight_decay = j.at("weight_decay").get<double>();
    o.adam.grad_clip = j.at("grad_clip").get<double>();
    o.seed = j.at("seed").get<uint64_t>();
    // Checkpoints from before mixed precision trained in float32.
    const std::string dt = j.value("dtype", std::string("float32"));
    if (dt == "bfloat16") o.dtype = DType::bf16;
    else if (dt != "float32") throw Error("dtype: expected float32 or bfloat16, found " + dt);
    o.text_hash = std::stoull(j.at("text_hash").get<std::string>());
  } catch (const std::exception& e) {
    throw Error("'" + name + "': bad training options (" + e.what() + ")");
  }
  return o;
}

namespace {

std::string shortest(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}
std::string shortest(int64_t x) { return std::to_string(x); }
std::string shortest(uint64_t x) { return std::to_string(x); }
std::string shortest(bool x) { return x ? "true" : "false"; }
std::string shortest(DType x) { return dtype_name(x); }

// A resumed run continues with the checkpoint's options. One given with a
// value other than its default and the checkpoint's would be silently
// ignored (a resume asked for 20 iterations running 0), so it is refused,
// named by its field.
void refuse_conflicts_with_checkpoint(const TrainOptions& given, const TrainOptions& saved) {
  const TrainOptions def;
  std::string conflicts;
  auto check = [&](const char* field, auto g, auto d, auto s) {
    if (g != d && g != s)
      conflicts += std::string(conflicts.empty() ? "" : ", ") + field + " " + shortest(g) +
                   " (checkpoint: " + shortest(s) + ")";
  };
  check("layers", given.model.layers, def.model.layers, saved.model.layers);
  check("heads", given.model.heads, def.model.heads, saved.model.heads);
  check("kv_heads", given.model.kv_heads, def.model.kv_heads, saved.model.kv_heads);
  check("embd", given.model.embd, def.model.embd, saved.model.embd);
  check("context", given.model.context, def.model.context, saved.model.context);
  check("rope", given.model.rope, def.model.rope, saved.model.rope);
  check("bias", given.model.bias, def.model.bias, saved.model.bias);
  check("batch", given.batch, def.batch, saved.batch);
  check("iters", given.iters, def.iters, saved.iters);
  check("warmup", given.warmup, def.warmup, saved.warmup);
  check("eval_interval", given.eval_interval, def.eval_interval, saved.eval_interval);
  check("eval_iters", given.eval_iters, def.eval_iters, saved.eval_iters);
  check("log_interval", given.log_interval, def.log_interval, saved.log_interval);
  check("lr", given.lr, def.lr, saved.lr);
  check("min_lr", given.min_lr, def.min_lr, saved.min_lr);
  check("beta1", given.adam.beta1, def.adam.beta1, saved.adam.beta1);
  check("beta2", given.adam.beta2, def.adam.beta2, saved.adam.beta2);
  check("weight_decay", given.adam.weight_decay, def.adam.weight_decay, saved.adam.weight_decay);
  check("grad_clip", given.adam.grad_clip, def.adam.grad_clip, saved.adam.grad_clip);
  check("seed", given.seed, def.seed, saved.seed);
  check("dtype", given.dtype, def.dtype, saved.dtype);
  if (!conflicts.empty())
    throw Error("resume: the checkpoint in '" + given.out_dir +
                "' continues with its own options; these differ: " + conflicts +
                ". Drop them, or start afresh with force");
}

}  // namespace

TrainOptions saved_train_options(const std::string& out_dir) {
  std::error_code ec;
  if (!fs::exists(out_dir + "/train_state.safetensors", ec))
    throw Error("resume: no checkpoint in '" + out_dir +
                "' (train_state.safetensors is missing); train without resume to start");
  return TrainOptions::from_json(load_train_state(out_dir).options_json,
                                 out_dir + "/train_state.safetensors");
}

TrainResult train(const TrainOptions& given) {
  given.validate();
  TrainOptions o = given;
  const bool writer = o.rank == 0;  // the one rank that writes and reports
  std::string text = read_text_file(o.text_path);
  const CharTokenizer tok = [&] {
    try {
      return CharTokenizer::from_text(text);
    } catch (const Error& e) {
      throw Error("text_path: '" + o.text_path + "': " + e.what());
    }
  }();
  o.model.vocab = tok.vocab_size();
  o.model.validate();

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);  // every rank: none waits for another
  if (ec || !fs::is_directory(o.out_dir))
    throw Error("out_dir: cannot create directory '" + o.out_dir + "': " + ec.message());
  run_dir::refuse_text_in_run_files(o.out_dir, o.text_path);
  // Before the lock, whose file would mark any directory as one qkv made.
  if (!o.resume && !o.force) refuse_foreign_directory(o.out_dir, {o.text_path});
  std::optional<run_dir::RunLock> lock;
  if (writer) {
    lock.emplace(o.out_dir);
    run_dir::remove_stale_temporaries(o.out_dir);
  }
  if (!o.resume && !o.force && fs::exists(o.out_dir + "/train_state.safetensors", ec))
    throw Error("out_dir: '" + o.out_dir +
                "' already holds a trained run (train_state.safetensors); continue it with "
                "resume, or pass force to start over and overwrite it");
  // A folder with a model but no training state (a Hugging Face download, a
  // `qkv import`) is no run of ours to overwrite by accident.
  if (!o.resume && !o.force && fs::exists(o.out_dir + "/model.safetensors", ec))
    throw Error("out_dir: '" + o.out_dir +
                "' already holds a model (model.safetensors) that no training run wrote there; "
                "pass force to overwrite it");

  o.text_hash = fnv1a(text);
  // The text is only needed as ids from here on.
  const TokenIds ids = encode_text(tok, text);
  std::string().swap(text);
  TrainState st;
  if (o.resume) {
    // The run continues with the options it started with; only where the
    // files are, how it reports and how many threads run may differ.
    TrainOptions saved = saved_train_options(o.out_dir);
    refuse_conflicts_with_checkpoint(o, saved);
    st = load_train_state(o.out_dir);
    if (saved.text_hash != o.text_hash)
      throw Error("resume: '" + o.text_path + "' is not the text the checkpoint in '" +
                  o.out_dir + "' was trained on");
    saved.text_path = o.text_path, saved.out_dir = o.out_dir, saved.threads = o.threads;
    saved.kernel = o.kernel, saved.on_progress = o.on_progress, saved.resume = true;
    saved.stop_at = o.stop_at, saved.force = o.force, saved.stop_requested = o.stop_requested;
    saved.eval_full = o.eval_full, saved.rank = o.rank, saved.ranks = o.ranks;
    saved.sum_over_ranks = o.sum_over_ranks, saved.sum_scalar_over_ranks = o.sum_scalar_over_ranks;
    o = saved;
    o.validate();
  }
  if (o.warmup < 0) o.warmup = std::min<int64_t>(100, o.iters / 10);
  GPT model(o.model);
  model.set_attention(o.kernel, o.threads);
  model.set_compute_dtype(o.dtype);
  AdamW opt(model, o.adam);
  int64_t start = 0;
  if (o.resume) {
    if (static_cast<int64_t>(st.weights.size()) != model.num_params())
      throw Error("'" + o.out_dir + "/train_state.safetensors': state for " +
                  std::to_string(st.weights.size()) + " weights, the model has " +
                  std::to_string(model.num_params()));
    set_weights(model, st.weights);
    opt.m() = st.m, opt.v() = st.v;
    opt.set_steps(st.adam_steps);
    start = st.next_iter;
    if (o.stop_at >= 0 && o.stop_at % o.eval_interval != 0)
      throw Error("stop_at must be a multiple of the run's eval_interval " + std::to_string(o.eval_interval) +
                  " (a checkpoint is written there), found " + std::to_string(o.stop_at));
    if (o.stop_at >= 0 && o.stop_at < start)
      throw Error("stop_at " + std::to_string(o.stop_at) + " is before the checkpoint's iteration " +
                  std::to_string(start) + ": the run would never stop there");
  } else {
    model.init(o.seed);
  }
  const Split data = split_data(ids, o.model.context, o.text_path);
  // The optimizer's loops run under the same count as the model's.
  const ThreadScope threads(o.threads);

  std::optional<run_dir::LogFile> log;
  if (writer) log.emplace(o.out_dir + "/log.jsonl", o.resume, start);
  const double before = log ? log->elapsed_before() : 0.0;
  auto report = [&](TrainProgress p) {
    if (writer && o.on_progress) o.on_progress(p);
  };
  TrainProgress hello;
  hello.event = TrainProgress::Event::start;
  hello.iters = o.iters, hello.first_iter = start, hello.params = model.num_params();
  hello.vocab = o.model.vocab, hello.text_tokens = id_count(ids), hello.elapsed_s = before;
  report(hello);

  const int64_t T = o.model.context;
  Shard sh(o);
  TrainResult res;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The model files and the resume point, as one set (qkv/checkpoint.h).
  auto checkpoint = [&](int64_t next_iter) {
    if (writer) save_checkpoint(o.out_dir, model, tok, opt, next_iter, o.to_json());
    res.next_iter = next_iter;
  };
  double val = NAN;
  for (int64_t it = start; it <= o.iters; ++it) {
    const bool eval = it % o.eval_interval == 0 || it == o.iters;
    json line = {{"iter", it}};
    if (eval) {
      res.final_train_loss = estimate_loss(model, data.train, sh, kEvalTrainStream);
      res.final_val_loss = val = estimate_loss(model, data.val, sh, kEvalValStream);
      line["val_loss"] = val;
      line["train_loss_estimate"] = res.final_train_loss;
      TrainProgress p;
      p.event = TrainProgress::Event::eval;
      p.iter = it, p.iters = o.iters, p.loss = res.final_train_loss, p.val_loss = val;
      if (o.eval_full || it == o.iters) {
        res.final_val_loss_full = p.val_loss_full = full_loss(model, data.val, sh);
        line["val_loss_full"] = p.val_loss_full;
      }
      checkpoint(it);
      p.elapsed_s = seconds();
      report(p);
    }
    if (it == o.iters || (eval && it == o.stop_at)) {
      line["elapsed_s"] = seconds();
      if (log) log->write(line);
      break;
    }
    const auto step0 = std::chrono::steady_clock::now();
    NumpyGenerator rng = batch_rng(o.seed, kTrainStream, static_cast<uint64_t>(it));
    get_batch(data.train, o.batch, T, rng, sh.row0, sh.rows, sh.x, sh.y);
    const double lr = learning_rate(it, o.lr, o.min_lr, o.warmup, o.iters);
    const double loss = sh.sum(model.forward(sh.x.data(), sh.y.data(), sh.rows, T)) / o.ranks;
    if (!std::isfinite(loss))
      throw Error("training diverged at iteration " + std::to_string(it) + " (loss " +
                  std::to_string(loss) + "); try a lower lr");
    model.backward();
    if (o.ranks > 1) {
      // The global batch's gradient: the mean of the ranks' (equal shares).
      std::vector<float>& g = model.grads();
      o.sum_over_ranks(g.data(), static_cast<int64_t>(g.size()));
      const float inv = 1.0f / static_cast<float>(o.ranks);
      for (float& v : g) v *= inv;
    }
    const double norm = opt.step(model, lr);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - step0).count();
    ++res.iters_run;
    TrainProgress p;
    p.event = TrainProgress::Event::step;
    p.iter = it, p.iters = o.iters, p.loss = loss, p.val_loss = val, p.lr = lr, p.grad_norm = norm;
    p.tokens_per_s = static_cast<double>(o.batch * T) / dt;
    p.elapsed_s = seconds();
    p.eta_s = (p.elapsed_s - before) / static_cast<double>(it - start + 1) *
              static_cast<double>(o.iters - it - 1);
    p.logged = eval || it % o.log_interval == 0;
    if (p.logged) {
      line["train_loss"] = loss;
      line["lr"] = lr;
      line["grad_norm"] = norm;
      line["tokens_per_s"] = p.tokens_per_s;
      line["elapsed_s"] = p.elapsed_s;
      if (log) log->write(line);
    }
    report(p);
    // Checked between steps only, so the checkpoint is one an evaluation
    // could have written: the batches of the remaining iterations and the
    // evaluations at multiples of eval_interval are the same after resume.
    // Every rank stops together: one rank's signal stops them all.
    const double stop = o.stop_requested && o.stop_requested->load() != 0 ? 1.0 : 0.0;
    if (sh.sum(stop) > 0.0) {
      checkpoint(it + 1);
      res.interrupted = true;
      break;
    }
  }
  if (!res.interrupted) {
    TrainProgress p;
    p.event = TrainProgress::Event::done;
    p.iter = res.next_iter, p.iters = o.iters, p.loss = res.final_train_loss;
    p.val_loss = res.final_val_loss, p.val_loss_full = res.final_val_loss_full, p.elapsed_s = seconds();
    report(p);
  }
  return res;
}

}  // namespace qkv
