// test_batcher.cpp: continuous batching (qkv/batcher.h) against each
// request run alone by sample_ids on the same model: the same tokens, for
// greedy and seeded draws, whatever joins or leaves the batch meanwhile;
// then its limits (slots, the KV budget), chunked prompts, cancel, stops
// and refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "expect_error.h"
#include "gpt_test_models.h"
#include "qkv/batcher.h"
#include "qkv/error.h"
#include "qkv/model.h"

using ::testing::HasSubstr;

namespace qkv {
namespace {

// A character model saved and loaded back: context 300 (past the 256
// positions a cache starts with), width 32 (one Q8_0 block a row), GQA,
// weights with signal on every path (gpt_test_models.h); loaded as float32
// or with its matrices in Q8_0.
struct Models {
  std::string dir;
  CharTokenizer tok = CharTokenizer::from_text("hello world, hold the door\n");
  Models() {
    dir = (std::filesystem::temp_directory_path() / ("qkv_batcher_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    GPTConfig cfg;
    cfg.vocab = tok.vocab_size();
    cfg.context = 300;
    cfg.layers = 2;
    cfg.heads = 4;
    cfg.kv_heads = 2;
    cfg.embd = 32;
    cfg.rope = true;
    GPT gpt(cfg);
    randomize(gpt, 11);
    save_model(dir, gpt, tok);
  }
  ~Models() { std::filesystem::remove_all(dir); }
  Model load(bool quantized) const {
    LoadOptions o;
    if (quantized) o.quantize = WeightType::q8_0;
    return Model::load(dir, o);
  }
};

const Models& models() {
  static const Models m;
  return m;
}

// Request i: a prompt of 1 + (5 i mod 13) characters, tokens 3 + (7 i mod 11).
BatchRequest request(int i, double temperature) {
  BatchRequest r;
  const std::string text = "hello world, hold the door\nhello";
  for (int t = 0; t <= (5 * i) % 13; ++t) r.prompt.push_back(models().tok.encode(std::string(1, text[(i + t) % text.size()]))[0]);
  r.options.tokens = 3 + (7 * i) % 11;
  r.options.temperature = temperature;
  r.options.top_k = temperature > 0 ? 6 : 0;
  r.options.seed = 100 + static_cast<uint64_t>(i);
  r.excluded = {models().tok.unknown_id()};
  return r;
}

BatcherOptions options(int64_t max_sequences, int64_t prefill_chunk = 256, int64_t kv_budget_bytes = 0) {
  BatcherOptions o;
  o.max_sequences = max_sequences;
  o.prefill_chunk = prefill_chunk;
  o.kv_budget_bytes = kv_budget_bytes;
  return o;
}

std::vector<int32_t> alone(Model& m, const BatchRequest& r, StopReason* why = nullptr) {
  return sample_ids(m.gpt(), r.prompt, r.options, r.excluded, r.stop_id, [](int32_t) {}, nullptr, why);
}

struct Outputs {
  std::map<int64_t, std::vector<int32_t>> ids;
  std::map<int64_t, StopReason> done;
  BatchRequest with_callbacks(BatchRequest r, int64_t id) {
    r.on_id = [this, id](int32_t t) { ids[id].push_back(t); };
    r.on_done = [this, id](StopReason w) { done[id] = w; };
    return r;
  }
};

// Submits requests 0 .. n - 1, `late` of them after a few steps, runs the
// batcher dry, and checks each against its run alone.
void expect_each_as_alone(bool quantized, double temperature, BatcherOptions o, int n, int late) {
  Model m = models().load(quantized);
  Batcher b(m, o);
  Outputs out;
  std::vector<int64_t> ids;
  for (int i = 0; i < n - late; ++i) ids.push_back(b.submit(out.with_callbacks(request(i, temperature), i)));
  for (int s = 0; s < 4; ++s) b.step();
  for (int i = n - late; i < n; ++i) ids.push_back(b.submit(out.with_callbacks(request(i, temperature), i)));
  int64_t steps = 0;
  while (b.step()) {
    EXPECT_LE(b.running(), o.max_sequences);
    ASSERT_LT(++steps, 1000);
  }
  EXPECT_EQ(b.running(), 0);
  EXPECT_EQ(b.waiting(), 0);
  EXPECT_EQ(b.kv_bytes(), 0);
  for (int i = 0; i < n; ++i) {
    StopReason why;
    EXPECT_EQ(out.ids[i], alone(m, request(i, temperature), &why)) << "request " << i;
    ASSERT_TRUE(out.done.count(i)) << "request " << i;
    EXPECT_EQ(out.done[i], why) << "request " << i;
  }
}

TEST(Batcher, GreedyRequestsGiveTheirTokensAlone) {
  expect_each_as_alone(true, 0.0, options(8), 8, 3);
  expect_each_as_alone(false, 0.0, options(8), 8, 3);
}

// Each request draws from its own generator: seeded sampling too.
TEST(Batcher, SeededDrawsAreTheirOwn) { expect_each_as_alone(true, 0.8, options(8), 8, 2); }

// Two slots for ten requests: they wait in order and all finish.
TEST(Batcher, RequestsPastTheSlotsWait) { expect_each_as_alone(true, 0.0, options(2), 10, 4); }

// A prompt runs in chunks of 3 between the others' decode steps, which
// each get a token every step meanwhile.
TEST(Batcher, ALongPromptRunsInChunksBetweenSteps) {
  expect_each_as_alone(false, 0.0, options(4, 3), 6, 2);
  Model m = models().load(true);
  Batcher b(m, options(8, 3));
  Outputs out;
  BatchRequest shortp = request(0, 0.0), longp = request(0, 0.0);
  shortp.options.tokens = 20;
  longp.prompt.assign(30, longp.prompt[0]);
  b.submit(out.with_callbacks(shortp, 0));
  b.step();  // its one-token prompt (a token drawn), and its first decode step (another)
  b.submit(out.with_callbacks(longp, 1));
  for (int s = 1; s <= 10; ++s) {
    b.step();
    EXPECT_EQ(out.ids[0].size(), static_cast<size_t>(s + 2)) << "step " << s;
    // 30 tokens: 10 chunks; the last draws its first token, which decodes in the same step.
    EXPECT_EQ(out.ids[1].size(), s < 10 ? 0u : 2u) << "step " << s;
  }
}

TEST(Batcher, CancelFreesTheSequenceAndSkipsTheWaiting) {
  Model m = models().load(true);
  Batcher b(m, options(1));
  Outputs out;
  BatchRequest r = request(1, 0.0);
  r.options.tokens = 30;
  const int64_t a = b.submit(out.with_callbacks(r, 0));
  const int64_t w = b.submit(out.with_callbacks(request(2, 0.0), 1));
  const int64_t c = b.submit(out.with_callbacks(request(3, 0.0), 2));
  b.step();
  b.step();
  EXPECT_EQ(b.running(), 1);
  EXPECT_GT(b.kv_bytes(), 0);
  b.cancel(a);
  b.cancel(w);
  b.cancel(999);  // unknown: ignored
  const size_t before = out.ids[0].size();
  while (b.step()) {}
  EXPECT_EQ(out.ids[0].size(), before);
  EXPECT_FALSE(out.done.count(0));
  EXPECT_FALSE(out.ids.count(1));
  EXPECT_EQ(out.ids[2], alone(m, request(3, 0.0)));
  EXPECT_EQ(out.done[2], StopReason::tokens);
  (void)c;
}

// The budget holds the caches of two requests at once, not three. Each
// cache holds what its request can use, no more: a short one the 256
// positions a cache starts with, a long one its prompt and tokens exactly,
// an endless one (tokens past the context) the context.
TEST(Batcher, TheKvBudgetLimitsTheSequencesAdmitted) {
  Model m = models().load(true);
  const GPTConfig& cfg = m.config();
  const int64_t per_position = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim() * 2;  // bf16
  const int64_t per_request = 256 * per_position;  // requests 0 .. 5: prompts and tokens under 256
  const BatcherOptions o = options(8, 256, 2 * per_request + 1);
  expect_each_as_alone(true, 0.0, o, 6, 0);
  Batcher b(m, o);
  for (int i = 0; i < 3; ++i) b.submit(request(i, 0.0));
  b.step();
  EXPECT_EQ(b.running(), 2);
  EXPECT_EQ(b.waiting(), 1);
  EXPECT_EQ(b.kv_bytes(), 2 * per_request);
  Batcher sized(m);
  BatchRequest longer = request(1, 0.0), endless = request(2, 0.0);
  longer.options.tokens = 270;
  endless.options.tokens = std::numeric_limits<int64_t>::max();
  sized.submit(longer);
  sized.step();
  EXPECT_EQ(sized.kv_bytes(), (static_cast<int64_t>(longer.prompt.size()) + 270) * per_position);
  sized.submit(endless);
  sized.step();
  EXPECT_EQ(sized.kv_bytes(), (static_cast<int64_t>(longer.prompt.size()) + 270 + cfg.context) * per_position);
  Outputs out;
  Batcher endless_alone(m);
  endless_alone.submit(out.with_callbacks(endless, 0));
  while (endless_alone.step()) {}
  EXPECT_EQ(out.done[0], StopReason::context);
  EXPECT_EQ(static_cast<int64_t>(out.ids[0].size() + endless.prompt.size()), cfg.context + 1);
  Batcher tight(m, options(8, 256, per_request / 2));
  expect_error([&] { tight.submit(request(0, 0.0)); }, "more than the budget");
  EXPECT_EQ(tight.waiting(), 0);
}

// A request whose callback throws ends there; the others go on to their
// tokens alone, and the error reaches step()'s caller.
TEST(Batcher, ARequestWhoseCallbackThrowsEndsAlone) {
  Model m = models().load(true);
  Batcher b(m);
  Outputs out;
  for (int i = 0; i < 4; ++i) {
    BatchRequest r = out.with_callbacks(request(i, 0.0), i);
    r.options.tokens = 8;
    if (i == 1) {
      r.on_id = [&out](int32_t t) {
        out.ids[1].push_back(t);
        if (out.ids[1].size() == 3) throw std::runtime_error("the client went away");
      };
    }
    b.submit(std::move(r));
  }
  int thrown = 0;
  for (int64_t steps = 0;; ++steps) {
    ASSERT_LT(steps, 1000);
    try {
      if (!b.step()) break;
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "the client went away");
      ++thrown;
    }
  }
  EXPECT_EQ(thrown, 1);
  EXPECT_EQ(out.ids[1].size(), 3u);
  EXPECT_FALSE(out.done.count(1));
  for (int i : {0, 2, 3}) {
    BatchRequest r = request(i, 0.0);
    r.options.tokens = 8;
    EXPECT_EQ(out.ids[i], alone(m, r)) << "request " << i;
    EXPECT_EQ(out.done[i], StopReason::tokens) << "request " << i;
  }
}

TEST(Batcher, StopsWhereSampleIdsStops) {
  Model m = models().load(true);
  Batcher b(m);
  Outputs out;
  BatchRequest eot = request(4, 0.0);
  eot.options.tokens = 40;
  const std::vector<int32_t> free_run = alone(m, eot);
  eot.stop_id = free_run[2];  // the third token drawn ends it (or an earlier one equal to it)
  BatchRequest full = request(5, 0.0);
  full.prompt.assign(296, full.prompt[0]);
  full.options.tokens = 40;  // the context (300) ends it first
  BatchRequest none = request(6, 0.0);
  none.options.tokens = 0;
  b.submit(out.with_callbacks(eot, 0));
  b.submit(out.with_callbacks(full, 1));
  b.submit(out.with_callbacks(none, 2));
  while (b.step()) {}
  StopReason why;
  EXPECT_EQ(out.ids[0], alone(m, eot, &why));
  EXPECT_EQ(out.done[0], StopReason::end_of_text);
  EXPECT_EQ(why, StopReason::end_of_text);
  EXPECT_EQ(out.ids[1], alone(m, full, &why));
  EXPECT_EQ(out.ids[1].size(), 5u);  // 296 + 5 = 301: the model has read all 300 positions
  EXPECT_EQ(out.done[1], StopReason::context);
  EXPECT_EQ(why, StopReason::context);
  EXPECT_FALSE(out.ids.count(2));
  EXPECT_EQ(out.done[2], StopReason::tokens);
}

// A server's threads: requests submitted, counted and cancelled from one
// thread while another steps.
TEST(Batcher, SubmitAndCancelFromAnotherThread) {
  Model m = models().load(true);
  Batcher b(m, options(3));
  Outputs out;  // written by the callbacks, on the stepping thread
  std::vector<BatchRequest> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back(out.with_callbacks(request(i, 0.0), i));
  std::atomic<bool> submitted{false};
  std::thread producer([&] {
    for (int i = 0; i < 12; ++i) {
      const int64_t id = b.submit(reqs[static_cast<size_t>(i)]);
      if (i == 7) b.cancel(id);
      (void)b.waiting();
      (void)b.running();
      (void)b.kv_bytes();
      std::this_thread::yield();
    }
    submitted = true;
  });
  for (int64_t steps = 0; !submitted || b.waiting() > 0 || b.running() > 0; ++steps) {
    if (!b.step()) std::this_thread::yield();
    ASSERT_LT(steps, 100000);
  }
  producer.join();
  for (int i = 0; i < 12; ++i) {
    if (i == 7) continue;  // cancelled: it may have run for some steps, or none
    EXPECT_EQ(out.ids[i], alone(m, request(i, 0.0))) << "request " << i;
    EXPECT_TRUE(out.done.count(i)) << "request " << i;
  }
  EXPECT_FALSE(out.done.count(7));
}

TEST(Batcher, BadRequestsAndOptionsAreRefused) {
  Model m = models().load(false);
  Batcher b(m);
  BatchRequest r = request(0, 0.0);
  r.prompt.clear();
  expect_error([&] { b.submit(r); }, "prompt: expected at least one token");
  r = request(0, 0.0);
  r.prompt.push_back(static_cast<int32_t>(m.config().vocab));
  expect_error([&] { b.submit(r); }, "outside the vocabulary");
  r = request(0, 0.0);
  r.prompt.assign(301, r.prompt[0]);
  expect_error([&] { b.submit(r); }, "more than the model's context of 300");
  r = request(0, 0.0);
  r.options.temperature = -1;
  expect_error([&] { b.submit(r); }, "temperature");
  r = request(0, 0.0);
  r.options.sliding_window = true;
  expect_error([&] { b.submit(r); }, "sliding_window");
  EXPECT_EQ(b.waiting(), 0);
  EXPECT_FALSE(b.step());
  expect_error([&] { Batcher(m, options(0)); }, "max_sequences must be at least 1");
  expect_error([&] { Batcher(m, options(8, 0)); }, "prefill_chunk must be at least 1");
  expect_error([&] { Batcher(m, options(8, 256, -1)); }, "kv_budget_bytes");
  BatcherOptions f64 = options(8);
  f64.dtype = DType::f64;
  expect_error([&] { Batcher(m, f64); }, "dtype: expected float32 or bf16");
}

}  // namespace
}  // namespace qkv
