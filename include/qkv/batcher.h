/// @file
/// qkv/batcher.h: continuous batching. Many generation requests on one
/// Model at once, each a sequence with its own KV cache, the weights shared:
///
///   qkv::Batcher batcher(model, {.max_sequences = 8});
///   batcher.submit({.prompt = ids, .options = {.tokens = 64, .temperature = 0},
///                   .on_id = [](int32_t id) { ... }, .on_done = [](qkv::StopReason) { ... }});
///   while (batcher.step()) {}
///
/// Each step() admits waiting requests while there is room, runs one chunk
/// of one prompt (so that a long prompt does not hold up the others), and
/// one decode step of every sequence past its prompt, together: their rows
/// go through each product at once (GPT::decode_batch), which reads the
/// weights once for all of them. A request joins at the next step after it
/// is submitted and leaves when it stops, or at the step after cancel().
///
/// Each request's tokens are drawn as sample_ids() draws them, from its own
/// generator seeded with its options.seed: greedy, a request gives the same
/// tokens whether it ran alone or beside any others (each row's logits are
/// its sequence's alone, the same bits for a quantized model's products
/// under 16 rows; within float32 rounding otherwise, where a near-tie could
/// go either way).
///
/// Memory: each admitted request holds a KV cache sized once, exactly, for
/// its own prompt and options.tokens (at least the 256 positions a cache
/// starts with, at most the context); admission waits while the caches held
/// plus the new one's would pass kv_budget_bytes. A new cache is allocated
/// outside the lock that submit() and cancel() take.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "qkv/export.h"
#include "qkv/gpt.h"
#include "qkv/model.h"
#include "qkv/rng.h"
#include "qkv/sampler.h"

namespace qkv {

/// One generation request.
struct BatchRequest {
  std::vector<int32_t> prompt;  ///< at least one id, each in the vocabulary, at most the context
  /// tokens, temperature, top_k, top_p and seed are read (no sliding window:
  /// a sequence stops at the context); the prompt text, dtype and kv_dtype
  /// are the Batcher's.
  SampleOptions options;
  std::vector<int32_t> excluded;  ///< ids never drawn (next_token_probs)
  int32_t stop_id = -1;           ///< an end-of-text id: drawn, it ends the request (-1: none)
  std::function<void(int32_t)> on_id;         ///< each new id as it is drawn, on step()'s thread
  std::function<void(StopReason)> on_done;    ///< once, when it ends (not after cancel())
};

/// How a Batcher schedules: slots, prompt chunks, the KV budget, dtypes.
struct BatcherOptions {
  int64_t max_sequences = 8;     ///< sequences decoding at once; more requests wait in order
  int64_t prefill_chunk = 256;   ///< prompt tokens a step runs (one prompt's)
  int64_t kv_budget_bytes = 0;   ///< the caches held at once; 0: no limit but max_sequences
  std::optional<DType> dtype;    ///< the products' (Model::next_logits); unset: the weights'
  std::optional<DType> kv_dtype; ///< the caches'; unset: Model::new_cache's
  /// Throws qkv::Error naming the first field out of range.
  void validate() const;
};

/// Requests queued, admitted and stepped together on one Model (above).
class QKV_API Batcher {
 public:
  /// The model must outlive the Batcher and be a decoder.
  explicit Batcher(Model& model, BatcherOptions options = {});
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  /// Queues a request and returns its id (0, 1, ...). Throws qkv::Error,
  /// queueing nothing, on an empty or too long prompt, an id outside the
  /// vocabulary, options out of range, or a request whose cache alone
  /// would pass kv_budget_bytes. Safe to call from any thread.
  int64_t submit(BatchRequest request);
  /// Ends request id (waiting or running) at the start of the next step:
  /// its sequence and cache are freed and it gets no callback after that
  /// (a request that ends in a step running meanwhile still gets its
  /// on_done). Unknown or finished ids are ignored. Safe to call from any
  /// thread.
  void cancel(int64_t id);
  /// One step (above). Returns false when there was nothing to do. An error
  /// of the model propagates, the requests as they were; a request whose
  /// draw or callback throws ends there (no on_done), the others go on, and
  /// the error propagates after the step.
  bool step();

  int64_t waiting() const;  ///< requests not yet admitted
  int64_t running() const;  ///< sequences admitted, in their prompt or decoding
  int64_t kv_bytes() const; ///< bytes the running sequences' caches are sized for

 private:
  struct Sequence;
  /// Positions a request's cache holds: its prompt and options.tokens (at
  /// most the context's worth), and their bytes.
  int64_t positions(const BatchRequest& r) const;
  int64_t cache_bytes(const BatchRequest& r) const;
  void admit();
  void prefill_one();
  void decode_all();
  /// Draws sequence s's next token from logits, hands it over, and says
  /// whether s goes on (false: it stopped and on_done was called).
  bool draw(Sequence& s, const float* logits);
  /// draw(), and s ended (null) when it stops or throws; the first error kept.
  bool draw_or_end(std::unique_ptr<Sequence>& s, const float* logits, std::exception_ptr& error);

  Model& model_;
  BatcherOptions opts_;
  mutable std::mutex queue_mutex_;  // waiting_, cancelled_, next_id_
  std::deque<std::pair<int64_t, BatchRequest>> waiting_;
  std::vector<int64_t> cancelled_;
  int64_t next_id_ = 0;
  std::vector<std::unique_ptr<Sequence>> running_;  // step()'s thread; null: ended this step
  int64_t running_count_ = 0, kv_bytes_ = 0;         // running_'s, for other threads (queue_mutex_)
};

}  // namespace qkv
