// batch_decode: what a decode step of B sequences together costs against
// one sequence's, and what continuous batching gains on a set of requests,
// on a model qkv loads (a GGUF file, a folder), through the public API only
// (qkv/model.h, qkv/batcher.h).
//
//   build/release/batch_decode --model file.gguf [--batch 1,2,4,8]
//       [--prompt 64] [--steps 32] [--requests 8] [--tokens 64]
//       [--rounds 5] [--threads 0]
//
// Steps: each sequence gets its own prompt of --prompt tokens of text (not
// timed), then --steps greedy steps of all B together are timed (Model::
// next_logits). Columns: B, the median step in ms, tokens/s of all
// sequences together, and that over B = 1's tokens/s.
// Requests: --requests greedy requests, prompts of different lengths
// (25 to 25 + 40 (R - 1) tokens), --tokens each, timed from the first
// prompt to the last token: one after another (sample_ids, as
// Model::generate runs one), or all submitted at once to a Batcher; every
// run must give the same tokens (else it says so and exits 1).
// Everything alternates round by round (--rounds, at least 5); the medians
// and ratios come from this one run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "qkv/batcher.h"
#include "qkv/error.h"
#include "qkv/model.h"
#include "qkv/sampler.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int32_t argmax(const float* l, int64_t n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

// Seconds a step of B sequences takes, the median of `steps` timed ones.
double step_seconds(qkv::Model& m, const std::vector<int32_t>& text, int64_t prompt, int64_t steps, int64_t B) {
  std::vector<qkv::KVCache> caches;
  std::vector<int32_t> next;
  const int64_t V = m.config().vocab;
  for (int64_t b = 0; b < B; ++b) {  // prompts from different places in the text
    const int64_t at = (b * 97) % std::max<int64_t>(1, static_cast<int64_t>(text.size()) - prompt);
    caches.push_back(m.new_cache());
    const qkv::Tensor l = m.next_logits({text.begin() + at, text.begin() + at + prompt}, caches.back());
    next.push_back(argmax(l.data<float>(), V));
  }
  std::vector<qkv::KVCache*> ptrs;
  for (qkv::KVCache& c : caches) ptrs.push_back(&c);
  std::vector<double> secs;
  for (int64_t s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const qkv::Tensor l = m.next_logits(next, ptrs);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (int64_t b = 0; b < B; ++b) next[b] = argmax(l.data<float>() + b * V, V);
  }
  return median(secs);
}

// The requests' greedy tokens, one after another (batched = false) or
// through a Batcher, and the seconds they took.
double serve(qkv::Model& m, const std::vector<std::vector<int32_t>>& prompts, int64_t tokens, bool batched,
             std::vector<std::vector<int32_t>>& out) {
  qkv::SampleOptions o;
  o.tokens = tokens;
  o.temperature = 0.0;
  out.assign(prompts.size(), {});
  // Both ways in the weights' dtype, as Model::generate and the Batcher run by default.
  m.gpt().set_compute_dtype(m.weights_dtype());
  const auto t0 = std::chrono::steady_clock::now();
  if (!batched) {
    for (size_t i = 0; i < prompts.size(); ++i) out[i] = qkv::sample_ids(m.gpt(), prompts[i], o, {}, -1, [](int32_t) {});
  } else {
    qkv::BatcherOptions bo;
    bo.max_sequences = static_cast<int64_t>(prompts.size());
    qkv::Batcher b(m, bo);
    for (size_t i = 0; i < prompts.size(); ++i) {
      qkv::BatchRequest r;
      r.prompt = prompts[i];
      r.options = o;
      r.on_id = [&out, i](int32_t id) { out[i].push_back(id); };
      b.submit(std::move(r));
    }
    while (b.step()) {
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"batch_decode: a decode step of B sequences together against one sequence's, and requests batched against one after another"};
  std::string model, text_path = "../shared/data/tinyshakespeare.txt";
  std::vector<int64_t> batches = {1, 2, 4, 8};
  int64_t prompt = 64, steps = 32, rounds = 5, requests = 8, tokens = 64;
  int threads = 0;
  app.add_option("--model", model, "a GGUF file or a model folder")->required();
  app.add_option("--text", text_path, "text the prompts are cut from")->check(CLI::ExistingFile);
  app.add_option("--batch", batches, "batch sizes, alternated round by round")->delimiter(',')->check(CLI::Range(1, 256));
  app.add_option("--prompt", prompt, "tokens of each sequence's prompt (not timed)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", steps, "timed steps a round")->check(CLI::Range(1, 1 << 20));
  app.add_option("--requests", requests, "requests of the batcher's comparison (0: none)")->check(CLI::Range(0, 256));
  app.add_option("--tokens", tokens, "tokens each request generates")->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", rounds, "rounds (at least 5)")->check(CLI::Range(5, 1000));
  app.add_option("--threads", threads, "threads (0 = all cores)")->check(CLI::Range(0, 1024));
  CLI11_PARSE(app, argc, argv);
  try {
    qkv::Model m = qkv::Model::load(model);
    m.set_threads(threads);
    std::ifstream f(text_path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::vector<int32_t> text = m.tokenize(ss.str().substr(0, 200000));
    if (static_cast<int64_t>(text.size()) < prompt) throw qkv::Error("the text has fewer tokens than --prompt");
    if (prompt + steps > m.config().context) throw qkv::Error("--prompt + --steps is past the model's context");
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < requests; ++i) {
      const int64_t n = 25 + 40 * i, at = (i * 997) % std::max<int64_t>(1, static_cast<int64_t>(text.size()) - n);
      if (static_cast<int64_t>(text.size()) < n || n + tokens > m.config().context)
        throw qkv::Error("--requests: a prompt of " + std::to_string(n) + " tokens and --tokens do not fit the text or the context");
      prompts.emplace_back(text.begin() + at, text.begin() + at + n);
    }
    std::vector<double> one_by_one, batched;
    std::vector<std::vector<int32_t>> first;  // the first run's tokens
    bool same = true;
    std::vector<std::vector<double>> secs(batches.size());
    for (int64_t r = 0; r < rounds; ++r)
      for (size_t i = 0; i < batches.size(); ++i) {
        const size_t k = (i + static_cast<size_t>(r)) % batches.size();  // each round starts elsewhere
        secs[k].push_back(step_seconds(m, text, prompt, steps, batches[k]));
      }
    for (int64_t r = 0; r < rounds && requests > 0; ++r)
      for (int k = 0; k < 2; ++k) {
        const bool use_batcher = (k + r) % 2 == 1;  // each round starts with the other
        std::vector<std::vector<int32_t>> out;
        (use_batcher ? batched : one_by_one).push_back(serve(m, prompts, tokens, use_batcher, out));
        if (first.empty()) first = out;
        same = same && out == first;  // every run, either way, the same tokens
      }
    double one = 0.0;
    std::printf("%6s %10s %12s %10s\n", "B", "step ms", "tokens/s", "x B=1");
    for (size_t k = 0; k < batches.size(); ++k) {
      const double s = median(secs[k]), tps = static_cast<double>(batches[k]) / s;
      if (batches[k] == 1) one = tps;
      std::printf("%6lld %10.2f %12.1f %10s\n", static_cast<long long>(batches[k]), 1e3 * s, tps,
                  one > 0 ? std::to_string(tps / one).substr(0, 4).c_str() : "-");
    }
    if (requests > 0) {
      const double a = median(one_by_one), b = median(batched);
      std::printf("\n%lld requests of %lld tokens: one after another %.2f s, batched %.2f s (%.2fx); tokens %s\n",
                  static_cast<long long>(requests), static_cast<long long>(tokens), a, b, a / b,
                  same ? "the same" : "DIFFERENT");
      if (!same) return 1;
    }
  } catch (const qkv::Error& e) {
    std::fprintf(stderr, "batch_decode: %s\n", e.what());
    return 1;
  }
}
