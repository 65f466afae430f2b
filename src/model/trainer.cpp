#include "qkv/trainer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "qkv/files.h"
#include "qkv/checkpoint.h"
#include "qkv/rng.h"
#include "qkv/runtime.h"
#include "qkv/tokenizer.h"

namespace qkv {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The whole file in one string of its size: no stream buffer and no copies,
// so a large text costs its size once.
std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error("--text: '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("--text: cannot read '" + path + "': no such file or no permission");
  const std::streamoff size = in.tellg();
  if (size == 0) throw Error("--text: '" + path + "' is empty; qkv train needs text to learn");
  std::string text(static_cast<size_t>(std::max<std::streamoff>(size, 0)), '\0');
  in.seekg(0);
  if (size < 0 || !in.read(text.data(), size))
    throw Error("--text: cannot read '" + path + "': read error");
  return text;
}

// Batches are drawn from a generator seeded by (seed, stream, index), not
// from one long stream, so iteration i's batch is the same whether or not
// the run was interrupted before it: resuming needs no generator state.
NumpyGenerator batch_rng(uint64_t seed, uint64_t stream, uint64_t index) {
  return NumpyGenerator(seed * 1000003ull + stream * 0x9E3779B97F4A7C15ull + index);
}

constexpr uint64_t kTrainStream = 0, kEvalTrainStream = 1, kEvalValStream = 2;

// The text's token ids in the smallest integer type that holds every id of
// the vocabulary: one byte per character for up to 256 characters, so the
// ids of a large text take about as much memory as the text itself.
using TokenIds = std::variant<std::vector<uint8_t>, std::vector<uint16_t>, std::vector<int32_t>>;

// A part of the ids: [begin, end).
struct Part {
  const TokenIds* ids;
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};

// x [B, T] and y [B, T] (x shifted by one) from random windows of `data`.
void get_batch(const Part& data, int64_t B, int64_t T, NumpyGenerator& rng,
               std::vector<int32_t>& x, std::vector<int32_t>& y) {
  const int64_t span = data.size() - T;  // windows start in [0, span)
  std::visit(
      [&](const auto& ids) {
        for (int64_t b = 0; b < B; ++b) {
          const int64_t off =
              data.begin + static_cast<int64_t>(rng.random() * static_cast<double>(span));
          std::copy_n(ids.begin() + off, T, x.begin() + b * T);
          std::copy_n(ids.begin() + off + 1, T, y.begin() + b * T);
        }
      },
      *data.ids);
}

// Encodes `text` a slice at a time (cut before a UTF-8 lead byte) straight
// into the narrow type, so no int32 copy of the whole text ever exists.
template <class Id>
std::vector<Id> encode_narrow(const CharTokenizer& tok, const std::string& text) {
  constexpr size_t kSlice = size_t{1} << 20;
  std::vector<Id> ids;
  ids.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.size(), at + kSlice);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) ++end;
    for (int32_t id : tok.encode(text.substr(at, end - at))) ids.push_back(static_cast<Id>(id));
    at = end;
  }
  ids.shrink_to_fit();
  return ids;
}

TokenIds encode_text(const CharTokenizer& tok, const std::string& text) {
  if (tok.vocab_size() <= 256) return encode_narrow<uint8_t>(tok, text);
  if (tok.vocab_size() <= 65536) return encode_narrow<uint16_t>(tok, text);
  return encode_narrow<int32_t>(tok, text);
}

int64_t id_count(const TokenIds& ids) {
  return std::visit([](const auto& v) { return static_cast<int64_t>(v.size()); }, ids);
}

struct Split {
  Part train, val;
};

Split split_data(const TokenIds& ids, int64_t T, const std::string& path) {
  const int64_t n = id_count(ids), n_train = n * 9 / 10;
  const int64_t need = 10 * (T + 1);  // so the 10% validation part holds one window
  if (n < need)
    throw Error("--text: '" + path + "' has " + std::to_string(n) + " characters; with --context " +
                std::to_string(T) + " it needs at least " + std::to_string(need) +
                " (90% train / 10% validation, each longer than the context)");
  return Split{Part{&ids, 0, n_train}, Part{&ids, n_train, n}};
}

// Mean loss over eval_iters fixed batches of one split.
double estimate_loss(GPT& model, const Part& data, const TrainOptions& o,
                     uint64_t stream, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  double sum = 0.0;
  for (int64_t k = 0; k < o.eval_iters; ++k) {
    NumpyGenerator rng = batch_rng(o.seed, stream, static_cast<uint64_t>(k));
    get_batch(data, o.batch, o.model.context, rng, x, y);
    sum += model.forward(x.data(), y.data(), o.batch, o.model.context);
  }
  return sum / static_cast<double>(o.eval_iters);
}

// log.jsonl, kept consistent with the checkpoint: on resume, lines from
// iterations after it (written by the interrupted run) are dropped.
class LogFile {
 public:
  LogFile(const std::string& path, bool resume, int64_t next_iter) : path_(path) {
    std::string kept;
    if (resume) {
      std::ifstream in(path);
      for (std::string line; std::getline(in, line);) {
        json j = json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("iter") && j["iter"].is_number_integer() &&
            j["iter"].get<int64_t>() < next_iter)
          kept += line + "\n";
      }
    }
    write_file_atomic(path_, {kept});
    out_.open(path_, std::ios::app);
    if (!out_) throw Error("cannot write '" + path_ + "'");
  }
  void write(const json& j) {
    out_ << j.dump() << "\n";
    out_.flush();
  }

 private:
  std::string path_;
  std::ofstream out_;
};

// FNV-1a: a fingerprint of the training text, so --resume can refuse a
// different one.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string format_eta(double seconds) {
  char buf[32];
  const int s = static_cast<int>(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d", s / 60, s % 60);
  return buf;
}

void draw_bar(int64_t it, int64_t iters, double loss, double val, double tok_s, double eta) {
  constexpr int kWidth = 24;
  const int fill = static_cast<int>(kWidth * (it + 1) / std::max<int64_t>(iters, 1));
  std::string bar(fill, '=');
  bar.resize(kWidth, ' ');
  char val_text[32] = "";
  if (!std::isnan(val)) std::snprintf(val_text, sizeof val_text, " val %.4f", val);
  std::fprintf(stderr, "\r[%s] iter %lld/%lld loss %.4f%s | %.1fk tok/s | ETA %s   ", bar.c_str(),
               static_cast<long long>(it + 1), static_cast<long long>(iters), loss, val_text,
               tok_s / 1000.0, format_eta(eta).c_str());
  std::fflush(stderr);
}

// Temporaries that killed runs left behind (".qkv-tmp.<pid>.<n>", see
// io/atomic_file.h): removed, unless the process that writes them runs.
void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, kTempPrefix.size(), kTempPrefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + kTempPrefix.size(), nullptr, 10);
    if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

// The run directory's lock: flock on DIR/.qkv-train.lock, held until the
// process exits (the kernel releases it even after a kill -9). Two runs
// writing one directory would interleave log.jsonl and overwrite each
// other's checkpoints.
class RunLock {
 public:
  explicit RunLock(const std::string& dir) {
    const std::string path = dir + "/.qkv-train.lock";
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0)
      throw Error("--out: cannot create the lock file '" + path + "': " + std::strerror(errno));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      close(fd_);
      if (err == EWOULDBLOCK)
        throw Error("--out: '" + dir +
                    "' is in use by another qkv train (it holds .qkv-train.lock); wait for it to "
                    "finish or choose another --out");
      throw Error("--out: cannot lock '" + path + "': " + std::strerror(err));
    }
  }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() { close(fd_); }

 private:
  int fd_ = -1;
};

}  // namespace

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
    o.text_hash = std::stoull(j.at("text_hash").get<std::string>());
  } catch (const std::exception& e) {
    throw Error("'" + name + "': bad training options (" + e.what() + ")");
  }
  return o;
}

TrainResult train(const TrainOptions& given) {
  TrainOptions o = given;
  std::string text = read_text_file(o.text_path);
  const CharTokenizer tok = [&] {
    try {
      return CharTokenizer::from_text(text);
    } catch (const Error& e) {
      throw Error("--text: '" + o.text_path + "': " + e.what());
    }
  }();
  o.model.vocab = tok.vocab_size();
  o.model.validate();

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir))
    throw Error("--out: cannot create directory '" + o.out_dir + "': " + ec.message());
  const RunLock lock(o.out_dir);
  remove_stale_temporaries(o.out_dir);
  if (!o.resume && !o.force && fs::exists(o.out_dir + "/train_state.safetensors", ec))
    throw Error("--out: '" + o.out_dir +
                "' already holds a trained run (train_state.safetensors); continue it with "
                "--resume, or pass --force to start over and overwrite it");

  o.text_hash = fnv1a(text);
  // The text is only needed as ids from here on.
  const TokenIds ids = encode_text(tok, text);
  std::string().swap(text);
  TrainState st;
  if (o.resume) {
    // The run continues with the options it started with; only where the
    // files are and how many threads run may differ.
    if (!fs::exists(o.out_dir + "/train_state.safetensors", ec))
      throw Error("--resume: no checkpoint in '" + o.out_dir +
                  "' (train_state.safetensors is missing); train without --resume to start");
    st = load_train_state(o.out_dir);
    TrainOptions saved = TrainOptions::from_json(st.options_json, o.out_dir + "/train_state.safetensors");
    if (saved.text_hash != o.text_hash)
      throw Error("--resume: '" + o.text_path + "' is not the text the checkpoint in '" +
                  o.out_dir + "' was trained on");
    saved.text_path = o.text_path, saved.out_dir = o.out_dir, saved.threads = o.threads;
    saved.kernel = o.kernel, saved.progress_bar = o.progress_bar, saved.resume = true;
    saved.stop_at = o.stop_at, saved.force = o.force;
    o = saved;
  }
  GPT model(o.model);
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
  } else {
    model.init(o.seed);
  }
  const Split data = split_data(ids, o.model.context, o.text_path);
  const int threads = o.threads > 0 ? o.threads : default_threads();
  omp_set_num_threads(threads);
  model.set_attention(o.kernel, threads);

  LogFile log(o.out_dir + "/log.jsonl", o.resume, start);
  const int64_t B = o.batch, T = o.model.context;
  std::vector<int32_t> x(B * T), y(B * T);
  TrainResult res;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The model files first (for qkv sample and PyTorch), then the resume
  // point, which commits the checkpoint: everything --resume needs is in it.
  auto checkpoint = [&](int64_t next_iter) {
    save_checkpoint(o.out_dir, model, tok, opt, next_iter, o.to_json());
    res.next_iter = next_iter;
  };
  double val = NAN, last_loss = NAN, tok_s = 0.0;
  for (int64_t it = start; it <= o.iters; ++it) {
    const bool eval = it % o.eval_interval == 0 || it == o.iters;
    json line = {{"iter", it}};
    if (eval) {
      res.final_train_loss = estimate_loss(model, data.train, o, kEvalTrainStream, x, y);
      res.final_val_loss = val = estimate_loss(model, data.val, o, kEvalValStream, x, y);
      line["val_loss"] = val;
      line["train_loss_estimate"] = res.final_train_loss;
      checkpoint(it);
      if (!o.progress_bar) {
        std::printf("iter %lld: train %.4f, val %.4f (checkpoint saved)\n",
                    static_cast<long long>(it), res.final_train_loss, val);
        std::fflush(stdout);  // log lines appear as they happen, also in a pipe
      }
    }
    if (it == o.iters || (eval && it == o.stop_at)) {
      line["elapsed_s"] = seconds();
      log.write(line);
      break;
    }
    const auto step0 = std::chrono::steady_clock::now();
    NumpyGenerator rng = batch_rng(o.seed, kTrainStream, static_cast<uint64_t>(it));
    get_batch(data.train, B, T, rng, x, y);
    const double lr = learning_rate(it, o.lr, o.min_lr, o.warmup, o.iters);
    last_loss = model.forward(x.data(), y.data(), B, T);
    if (!std::isfinite(last_loss))
      throw Error("training diverged at iteration " + std::to_string(it) + " (loss " +
                  std::to_string(last_loss) + "); try a lower --lr");
    model.backward();
    const double norm = opt.step(model, lr);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - step0).count();
    tok_s = static_cast<double>(B * T) / dt;
    ++res.iters_run;
    if (eval || it % o.log_interval == 0) {
      line["train_loss"] = last_loss;
      line["lr"] = lr;
      line["grad_norm"] = norm;
      line["tokens_per_s"] = tok_s;
      line["elapsed_s"] = seconds();
      log.write(line);
      if (!o.progress_bar) {
        std::printf("iter %lld/%lld loss %.4f lr %.2e %.1fk tok/s %.1fs\n",
                    static_cast<long long>(it), static_cast<long long>(o.iters), last_loss, lr,
                    tok_s / 1000.0, seconds());
        std::fflush(stdout);
      }
    }
    if (o.progress_bar) {
      const double per_iter = seconds() / static_cast<double>(it - start + 1);
      draw_bar(it, o.iters, last_loss, val, tok_s, per_iter * static_cast<double>(o.iters - it - 1));
    }
    // Checked between steps only, so the checkpoint is one an evaluation
    // could have written: the batches of the remaining iterations and the
    // evaluations at multiples of eval_interval are the same after --resume.
    if (o.stop_requested && o.stop_requested->load() != 0) {
      checkpoint(it + 1);
      res.interrupted = true;
      break;
    }
  }
  if (o.progress_bar) std::fprintf(stderr, "\n");
  if (res.interrupted) return res;
  std::printf("done: train loss %.4f, val loss %.4f; model in %s\n", res.final_train_loss,
              res.final_val_loss, o.out_dir.c_str());
  return res;
}

}  // namespace qkv
