#include "qkv/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <span>

#include "qkv/rng.h"

namespace qkv {
namespace {

// A number as the user wrote it ("0.5", "-1", "nan"), for messages.
std::string number_str(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// The checks of the options that choose a token (next_token_probs's).
void check_choice_options(const SampleOptions& o) {
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))  // NaN fails too
    throw Error("temperature: expected a finite number >= 0 (0 = greedy), found " + number_str(o.temperature));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0))
    throw Error("top_p: expected a probability in (0, 1] (1 = off), found " + number_str(o.top_p));
  if (o.top_k < 0) throw Error("top_k: expected 0 (off) or a positive count, found " + std::to_string(o.top_k));
}

}  // namespace

void SampleOptions::validate() const {
  if (tokens < 0) throw Error("tokens: expected a count >= 0, found " + std::to_string(tokens));
  check_choice_options(*this);
  if (dtype && *dtype != DType::f32 && *dtype != DType::bf16)
    throw Error(std::string("dtype: expected float32 or bf16, found ") + dtype_name(*dtype));
  if (kv_dtype && *kv_dtype != DType::f32 && *kv_dtype != DType::bf16)
    throw Error(std::string("kv_dtype: expected float32 or bf16, found ") + dtype_name(*kv_dtype));
}

const char* stop_reason_name(StopReason why) {
  switch (why) {
    case StopReason::tokens: return "tokens";
    case StopReason::end_of_text: return "end_of_text";
    case StopReason::context: return "context";
  }
  return "?";
}

std::vector<double> next_token_probs(const float* logits, int64_t V, const SampleOptions& o,
                                     const std::vector<int32_t>& excluded) {
  check_choice_options(o);
  // p holds logits, -inf for the tokens removed so far; then probabilities.
  std::vector<double> p(logits, logits + V);
  for (const int32_t id : excluded)
    if (id >= 0 && id < V) p[static_cast<size_t>(id)] = -INFINITY;
  const auto best = std::max_element(p.begin(), p.end());  // the first maximum
  if (*best == -INFINITY) throw Error("sample: every token is excluded, none is left to choose");
  if (o.temperature == 0.0) {
    // Greedy: the argmax survives any top-k and top-p, so those change nothing.
    std::vector<double> one_hot(static_cast<size_t>(V), 0.0);
    one_hot[static_cast<size_t>(best - p.begin())] = 1.0;
    return one_hot;
  }
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[o.top_k - 1];
    for (double& x : p)
      if (x < kth) x = -INFINITY;
  }
  const double m = *best;
  double sum = 0.0;
  for (double& x : p) sum += (x = std::exp((x - m) / o.temperature));
  for (double& x : p) x /= sum;
  if (o.top_p < 1.0) {
    // Likeliest first (the lower id first among equals), keep tokens until
    // their mass reaches top_p: the smallest such set.
    std::vector<int64_t> order(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double kept = 0.0;
    size_t n = 0;
    while (n < order.size() && kept < o.top_p) kept += p[static_cast<size_t>(order[n++])];
    for (size_t i = n; i < order.size(); ++i) p[static_cast<size_t>(order[i])] = 0.0;
    for (double& x : p) x /= kept;
  }
  return p;
}

int32_t pick_token(const std::vector<double>& probs, double u) {
  double acc = 0.0;
  for (size_t i = 0; i < probs.size(); ++i)
    if ((acc += probs[i]) > u) return static_cast<int32_t>(i);
  for (size_t i = probs.size(); i-- > 0;)  // u landed on the rounding edge: the last nonzero
    if (probs[i] > 0.0) return static_cast<int32_t>(i);
  throw Error("sample: no token has a nonzero probability");
}

std::vector<int32_t> sample(GPT& model, const CharTokenizer& tok, const SampleOptions& o,
                            const std::function<void(const std::string&)>& on_token, KVCache* cache,
                            StopReason* stop) {
  return sample_ids(model, tok.encode(o.prompt.empty() ? "\n" : o.prompt), o, {tok.unknown_id()}, -1,
                    [&](int32_t id) { on_token(tok.decode({id})); }, cache, stop);
}

std::vector<int32_t> sample_ids(GPT& model, std::vector<int32_t> seq, const SampleOptions& o,
                                const std::vector<int32_t>& excluded, int32_t stop_id,
                                const std::function<void(int32_t)>& on_id, KVCache* reuse, StopReason* stop) {
  o.validate();
  const int64_t ctx = model.config().context, V = model.config().vocab;
  if (seq.empty()) throw Error("prompt: expected at least one token");
  for (const int32_t id : seq)
    if (id < 0 || id >= V)
      throw Error("prompt: token id " + std::to_string(id) + " outside the vocabulary [0, " + std::to_string(V) + ")");
  if (static_cast<int64_t>(seq.size()) > ctx && !o.sliding_window)
    throw Error("prompt: " + std::to_string(seq.size()) + " tokens, more than the model's context of " +
                std::to_string(ctx) + " (its positions end there); shorten it, or generate with a sliding window");
  const size_t prompt_len = seq.size();
  StopReason why = StopReason::tokens;
  NumpyGenerator rng(o.seed);
  // A cache made here is allocated and zeroed on every call: for a real
  // model, tens of MB of fresh pages, longer than a short prompt's prefill.
  std::optional<KVCache> own;
  KVCache& cache = reuse ? *reuse : own.emplace(model.new_cache(o.kv_dtype));
  cache.reset();
  int64_t cache_start = 0;  // the cache holds seq[cache_start, cache_start + cache.len())
  std::span<const float> logits;
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int64_t len = static_cast<int64_t>(seq.size());
    if (len > ctx && !o.sliding_window) {  // the model cannot read the sequence any more
      why = StopReason::context;
      break;
    }
    const int64_t start = std::max<int64_t>(0, len - ctx);  // the window the model sees
    if (!o.use_cache) {
      model.forward(seq.data() + start, nullptr, 1, len - start);
      logits = {model.logits() + (len - start - 1) * V, static_cast<size_t>(V)};
    } else if (start == cache_start && cache.len() == len - start - 1) {
      logits = model.decode_step(seq.back(), cache);  // append the newest token
    } else {
      // First step, or the sliding window moved on: positions shift,
      // so the cached keys are stale; refill the cache for the window, in
      // one pass over its tokens (the prefill: row-parallel products, not
      // one product per token).
      cache.reset();
      cache_start = start;
      logits = model.decode(seq.data() + start, len - start, cache);
    }
    // logits views the model's scratch: used here, before the next step.
    const int32_t next = pick_token(next_token_probs(logits.data(), V, o, excluded), rng.random());
    seq.push_back(next);
    on_id(next);
    if (next == stop_id) {
      why = StopReason::end_of_text;
      break;
    }
  }
  if (stop) *stop = why;
  return std::vector<int32_t>(seq.begin() + static_cast<int64_t>(prompt_len), seq.end());
}

}  // namespace qkv
