// batcher.cpp: continuous batching on one Model (qkv/batcher.h).
//
// A step: cancelled requests leave; waiting ones are admitted while there
// are slots and the budget allows; one chunk of the oldest unfinished
// prompt runs (Model::next_logits of one sequence); then every sequence
// with a drawn token not yet in its cache runs one decode step, all in one
// Model::next_logits of B tokens. Tokens are drawn as sample_ids() draws
// them (next_token_probs, pick_token, one uniform number each, from the
// request's own generator), and a request stops where sample_ids would.
#include "qkv/batcher.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <string>

#include "qkv/error.h"

namespace qkv {

struct Batcher::Sequence {
  int64_t id;
  BatchRequest req;
  KVCache cache;
  NumpyGenerator rng;
  int64_t fed = 0;        // prompt tokens in the cache
  int64_t generated = 0;  // tokens drawn
  int32_t pending = -1;   // a drawn token not yet in the cache (-1: none)
};

void BatcherOptions::validate() const {
  if (max_sequences < 1) throw Error("batcher options: max_sequences must be at least 1, found " + std::to_string(max_sequences));
  if (prefill_chunk < 1) throw Error("batcher options: prefill_chunk must be at least 1, found " + std::to_string(prefill_chunk));
  if (kv_budget_bytes < 0) throw Error("batcher options: kv_budget_bytes must be >= 0 (0: no limit), found " + std::to_string(kv_budget_bytes));
  if (dtype && *dtype != DType::f32 && *dtype != DType::bf16)
    throw Error(std::string("batcher options: dtype: expected float32 or bf16, found ") + dtype_name(*dtype));
  if (kv_dtype && *kv_dtype != DType::f32 && *kv_dtype != DType::bf16)
    throw Error(std::string("batcher options: kv_dtype: expected float32 or bf16, found ") + dtype_name(*kv_dtype));
}

Batcher::Batcher(Model& model, BatcherOptions options) : model_(model), opts_(std::move(options)) {
  opts_.validate();
  if (model_.is_encoder()) throw Error("batcher: the model is an encoder: it generates nothing");
}

Batcher::~Batcher() = default;

int64_t Batcher::positions(const BatchRequest& r) const {
  // tokens may be huge ("until the end of text"): the context bounds it first.
  return static_cast<int64_t>(r.prompt.size()) + std::min(r.options.tokens, model_.config().context);
}

int64_t Batcher::cache_bytes(const BatchRequest& r) const {
  const DType kv = opts_.kv_dtype.value_or(model_.gpt().default_kv_dtype(opts_.dtype.value_or(model_.weights_dtype())));
  return KVCache::bytes_after_reserve(model_.config(), kv, positions(r));
}

int64_t Batcher::submit(BatchRequest r) {
  const GPTConfig& c = model_.config();
  r.options.validate();
  if (r.prompt.empty()) throw Error("prompt: expected at least one token");
  for (const int32_t id : r.prompt)
    if (id < 0 || id >= c.vocab)
      throw Error("prompt: token id " + std::to_string(id) + " outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  if (static_cast<int64_t>(r.prompt.size()) > c.context)
    throw Error("prompt: " + std::to_string(r.prompt.size()) + " tokens, more than the model's context of " +
                std::to_string(c.context));
  if (r.options.sliding_window) throw Error("sliding_window: a batched request stops at the context");
  if (opts_.kv_budget_bytes > 0 && cache_bytes(r) > opts_.kv_budget_bytes)
    throw Error("request: its KV cache needs " + std::to_string(cache_bytes(r)) + " bytes, more than the budget of " +
                std::to_string(opts_.kv_budget_bytes) + " (fewer tokens or a shorter prompt)");
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  const int64_t id = next_id_++;
  waiting_.emplace_back(id, std::move(r));
  return id;
}

void Batcher::cancel(int64_t id) {
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  cancelled_.push_back(id);
}

int64_t Batcher::waiting() const {
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  return static_cast<int64_t>(waiting_.size());
}

int64_t Batcher::running() const {
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  return running_count_;
}

int64_t Batcher::kv_bytes() const {
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  return kv_bytes_;
}

void Batcher::admit() {
  for (;;) {
    std::optional<std::pair<int64_t, BatchRequest>> next;
    int64_t bytes = 0;
    {
      const std::lock_guard<std::mutex> lock(queue_mutex_);
      std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return !s; });  // after a step that threw
      for (const int64_t id : cancelled_) {
        std::erase_if(waiting_, [id](const auto& w) { return w.first == id; });
        std::erase_if(running_, [id](const std::unique_ptr<Sequence>& s) { return s->id == id; });
      }
      cancelled_.clear();
      kv_bytes_ = 0;
      for (const auto& s : running_) kv_bytes_ += s->cache.nbytes();
      running_count_ = static_cast<int64_t>(running_.size());
      if (waiting_.empty() || running_count_ >= opts_.max_sequences) return;
      bytes = cache_bytes(waiting_.front().second);
      if (opts_.kv_budget_bytes > 0 && kv_bytes_ + bytes > opts_.kv_budget_bytes) return;  // it waits, in order
      next = std::move(waiting_.front());
      waiting_.pop_front();
      kv_bytes_ += bytes;  // counted before it is allocated, below, outside the lock
      ++running_count_;
    }
    BatchRequest& r = next->second;
    KVCache cache = model_.new_cache(opts_.kv_dtype, opts_.dtype);
    cache.reserve(positions(r));
    const uint64_t seed = r.options.seed;
    auto seq = std::unique_ptr<Sequence>(new Sequence{next->first, std::move(r), std::move(cache), NumpyGenerator(seed)});
    const std::lock_guard<std::mutex> lock(queue_mutex_);
    running_.push_back(std::move(seq));
  }
}

bool Batcher::draw(Sequence& s, const float* logits) {
  const BatchRequest& r = s.req;
  const int32_t next = pick_token(next_token_probs(logits, model_.config().vocab, r.options, r.excluded), s.rng.random());
  ++s.generated;
  if (r.on_id) r.on_id(next);
  std::optional<StopReason> why;
  if (next == r.stop_id) why = StopReason::end_of_text;
  else if (s.generated == r.options.tokens) why = StopReason::tokens;
  // sample_ids' test before its next step: the model reads at most the context.
  else if (static_cast<int64_t>(r.prompt.size()) + s.generated > model_.config().context) why = StopReason::context;
  if (why) {
    if (r.on_done) r.on_done(*why);
    return false;
  }
  s.pending = next;
  return true;
}

// A sequence whose draw (or callback) threw ends there: its token is in
// no cache and none follows it. The others go on; the first error is
// rethrown once every row is handled.
bool Batcher::draw_or_end(std::unique_ptr<Sequence>& s, const float* logits, std::exception_ptr& error) {
  try {
    if (draw(*s, logits)) return true;
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  s.reset();
  return false;
}

void Batcher::prefill_one() {
  for (auto& s : running_) {
    if (!s) continue;
    const auto n = static_cast<int64_t>(s->req.prompt.size());
    if (s->fed == n) continue;
    if (s->req.options.tokens == 0) {  // nothing to generate: sample_ids runs nothing
      std::unique_ptr<Sequence> done = std::move(s);
      if (done->req.on_done) done->req.on_done(StopReason::tokens);
      return;
    }
    const int64_t k = std::min(opts_.prefill_chunk, n - s->fed);
    const std::vector<int32_t> chunk(s->req.prompt.begin() + s->fed, s->req.prompt.begin() + s->fed + k);
    const Tensor logits = model_.next_logits(chunk, s->cache, opts_.dtype);
    s->fed += k;
    std::exception_ptr error;
    if (s->fed == n) draw_or_end(s, logits.data<float>(), error);
    if (error) std::rethrow_exception(error);
    return;
  }
}

void Batcher::decode_all() {
  std::vector<int32_t> tokens;
  std::vector<KVCache*> caches;
  std::vector<std::unique_ptr<Sequence>*> rows;
  for (auto& s : running_)
    if (s && s->pending >= 0) {
      tokens.push_back(s->pending);
      caches.push_back(&s->cache);
      rows.push_back(&s);
    }
  if (rows.empty()) return;
  const Tensor logits = model_.next_logits(tokens, caches, opts_.dtype);
  for (auto* s : rows) (*s)->pending = -1;  // every row's token is in its cache now
  const int64_t V = model_.config().vocab;
  std::exception_ptr error;
  for (size_t b = 0; b < rows.size(); ++b) draw_or_end(*rows[b], logits.data<float>() + static_cast<int64_t>(b) * V, error);
  if (error) std::rethrow_exception(error);
}

bool Batcher::step() {
  admit();
  if (running_.empty()) return false;
  prefill_one();
  decode_all();
  // The finished leave: their slots and cache bytes are free for the next step.
  const std::lock_guard<std::mutex> lock(queue_mutex_);
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return !s; });
  kv_bytes_ = 0;
  for (const auto& s : running_) kv_bytes_ += s->cache.nbytes();
  running_count_ = static_cast<int64_t>(running_.size());
  return true;
}

}  // namespace qkv
