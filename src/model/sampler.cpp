#include "qkv/sampler.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "qkv/rng.h"

namespace qkv {
namespace {

// Draws from softmax(logits / temperature) restricted to the top k, by
// inverse CDF with one uniform number.
int32_t draw(std::span<const float> logits, const SampleOptions& o, NumpyGenerator& rng,
             std::vector<double>& p) {
  const int64_t V = static_cast<int64_t>(logits.size());
  p.assign(logits.begin(), logits.end());
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[o.top_k - 1];
    for (double& x : p)
      if (x < kth) x = -INFINITY;
  }
  const double m = *std::max_element(p.begin(), p.end());
  double sum = 0.0;
  for (double& x : p) sum += (x = std::exp((x - m) / o.temperature));
  const double u = rng.random() * sum;
  double acc = 0.0;
  for (int64_t i = 0; i < V; ++i)
    if ((acc += p[i]) > u) return static_cast<int32_t>(i);
  for (int64_t i = V - 1; i >= 0; --i)  // u landed on the rounding edge: the last nonzero
    if (p[i] > 0.0) return static_cast<int32_t>(i);
  return 0;
}

}  // namespace

std::vector<int32_t> sample(GPT& model, const CharTokenizer& tok, const SampleOptions& o,
                            const std::function<void(const std::string&)>& on_token) {
  if (!(o.temperature > 0.0) || !std::isfinite(o.temperature))
    throw Error("temperature: expected a number > 0, found " + std::to_string(o.temperature));
  if (o.top_k < 0) throw Error("top_k: expected 0 (off) or a positive count, found " + std::to_string(o.top_k));
  if (o.tokens < 0) throw Error("tokens: expected a count >= 0, found " + std::to_string(o.tokens));
  const int64_t ctx = model.config().context, V = model.config().vocab;
  std::vector<int32_t> seq = tok.encode(o.prompt.empty() ? "\n" : o.prompt);
  const size_t prompt_len = seq.size();
  NumpyGenerator rng(o.seed);
  std::vector<double> p;
  KVCache cache = model.new_cache();
  int64_t cache_start = 0;  // the cache holds seq[cache_start, cache_start + cache.len())
  std::span<const float> logits;
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int64_t len = static_cast<int64_t>(seq.size());
    const int64_t start = std::max<int64_t>(0, len - ctx);  // the window the model sees
    if (!o.use_cache) {
      model.forward(seq.data() + start, nullptr, 1, len - start);
      logits = {model.logits() + (len - start - 1) * V, static_cast<size_t>(V)};
    } else if (start == cache_start && cache.len() == len - start - 1) {
      logits = model.decode_step(seq.back(), cache);  // append the newest token
    } else {
      // First step, or the window slid past the context: positions shift,
      // so the cached keys are stale; refill the cache for the window.
      cache.reset();
      cache_start = start;
      for (int64_t i = start; i < len; ++i) logits = model.decode_step(seq[i], cache);
    }
    // logits views the model's scratch: used here, before the next step.
    const int32_t next = draw(logits, o, rng, p);
    seq.push_back(next);
    on_token(tok.decode({next}));
  }
  return std::vector<int32_t>(seq.begin() + static_cast<int64_t>(prompt_len), seq.end());
}

}  // namespace qkv
