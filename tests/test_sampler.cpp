// The token choice of qkv::sample: temperature (0 = greedy), top-k, top-p
// (nucleus) and the tokenizer's unknown id, which must never be drawn.
#include "qkv/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "qkv/error.h"

using qkv::SampleOptions;

namespace {

// Logits whose softmax at temperature 1 is exactly `probs` (up to float).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<double> probs(const std::vector<float>& logits, const SampleOptions& o,
                          const std::vector<int32_t>& excluded = {}) {
  return qkv::next_token_probs(logits.data(), static_cast<int64_t>(logits.size()), o, excluded);
}

std::vector<int32_t> support(const std::vector<double>& p) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0.0) ids.push_back(static_cast<int32_t>(i));
  return ids;
}

SampleOptions top_p(double p, double temperature = 1.0) {
  SampleOptions o;
  o.top_p = p;
  o.temperature = temperature;
  return o;
}

}  // namespace

TEST(TopP, KeepsTheSmallestSetOfLikeliestTokensWhoseProbabilityReachesP) {
  // Ids out of probability order, so the choice must sort: 1 (0.5), 3 (0.3), 2 (0.15), 0 (0.05).
  const auto l = logits_of({0.05, 0.5, 0.15, 0.3});
  using Ids = std::vector<int32_t>;
  EXPECT_EQ(support(probs(l, top_p(0.3))), (Ids{1}));
  EXPECT_EQ(support(probs(l, top_p(0.45))), (Ids{1}));
  EXPECT_EQ(support(probs(l, top_p(0.55))), (Ids{1, 3}));
  EXPECT_EQ(support(probs(l, top_p(0.79))), (Ids{1, 3}));
  EXPECT_EQ(support(probs(l, top_p(0.81))), (Ids{1, 2, 3}));
  EXPECT_EQ(support(probs(l, top_p(0.96))), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(support(probs(l, top_p(1.0))), (Ids{0, 1, 2, 3}));
  // The kept tokens keep their ratios: renormalised over the set.
  const auto p = probs(l, top_p(0.81));
  EXPECT_NEAR(p[1], 0.5 / 0.95, 1e-6);
  EXPECT_NEAR(p[3], 0.3 / 0.95, 1e-6);
  EXPECT_NEAR(p[2], 0.15 / 0.95, 1e-6);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-12);
}

TEST(TopP, MinimalOnRandomLogits) {
  // On random logits and P: the kept set holds every token likelier than
  // any dropped one, its mass reaches P, and without its least likely
  // member it would not.
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<double> unit(0.01, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> l(1 + gen() % 40);
    for (float& x : l) x = normal(gen);
    const double P = unit(gen);
    const auto full = probs(l, SampleOptions{});
    const auto kept = probs(l, top_p(P));
    double mass = 0.0, least_kept = 1.0, most_dropped = 0.0;
    for (size_t i = 0; i < l.size(); ++i) {
      if (kept[i] > 0.0) {
        mass += full[i];
        least_kept = std::min(least_kept, full[i]);
      } else {
        most_dropped = std::max(most_dropped, full[i]);
      }
    }
    EXPECT_GE(least_kept, most_dropped) << "trial " << trial;
    EXPECT_GE(mass, P - 1e-12) << "trial " << trial;
    EXPECT_LT(mass - least_kept, P) << "trial " << trial;
  }
}

TEST(TopP, AppliesToTheTemperedTopKDistribution) {
  const auto l = logits_of({0.05, 0.5, 0.15, 0.3});
  // Temperature 2 flattens to ∝ sqrt(p): 0.224, 0.707, 0.387, 0.548 (sum
  // 1.866), i.e. 0.12, 0.379, 0.208, 0.294: 0.6 needs ids 1, 3 (0.673).
  EXPECT_EQ(support(probs(l, top_p(0.6, 2.0))), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(support(probs(l, top_p(0.7, 2.0))), (std::vector<int32_t>{1, 2, 3}));
  // top-k 2 leaves ids 1, 3, renormalised to 0.625, 0.375: id 1 alone reaches 0.62, not 0.63.
  SampleOptions o = top_p(0.62);
  o.top_k = 2;
  EXPECT_EQ(support(probs(l, o)), (std::vector<int32_t>{1}));
  o.top_p = 0.63;
  EXPECT_EQ(support(probs(l, o)), (std::vector<int32_t>{1, 3}));
}

TEST(Greedy, TemperatureZeroIsTheArgmaxWhateverU) {
  const std::vector<float> l = {0.1f, 2.5f, -1.0f, 2.4f};
  SampleOptions o;
  o.temperature = 0.0;
  const auto p = probs(l, o);
  EXPECT_EQ(p, (std::vector<double>{0, 1, 0, 0}));
  for (double u : {0.0, 0.3, 0.999999})
    EXPECT_EQ(qkv::pick_token(p, u), 1);
  o.top_k = 3, o.top_p = 0.1;  // the argmax survives both: nothing changes
  EXPECT_EQ(probs(l, o), p);
  // Ties go to the lowest id, so greedy decoding is deterministic.
  EXPECT_EQ(support(probs({1.0f, 3.0f, 3.0f}, o)), (std::vector<int32_t>{1}));
}

TEST(Excluded, NeverGetsProbabilityEvenAsTheLikeliest) {
  const std::vector<float> l = {0.0f, 1.0f, 9.0f};
  for (double t : {0.0, 0.5, 1.0, 10.0}) {
    SampleOptions o;
    o.temperature = t;
    const auto p = probs(l, o, /*excluded=*/{2});
    EXPECT_EQ(p[2], 0.0) << "temperature " << t;
    EXPECT_NEAR(p[0] + p[1], 1.0, 1e-12);
    o.top_k = 1;  // the likeliest token left is id 1
    EXPECT_EQ(support(probs(l, o, {2})), (std::vector<int32_t>{1}));
  }
}

TEST(PickToken, InverseCdf) {
  const std::vector<double> p = {0.2, 0.3, 0.0, 0.5};
  EXPECT_EQ(qkv::pick_token(p, 0.0), 0);
  EXPECT_EQ(qkv::pick_token(p, 0.19), 0);
  EXPECT_EQ(qkv::pick_token(p, 0.2), 1);
  EXPECT_EQ(qkv::pick_token(p, 0.6), 3);
  // Probabilities that sum to just under u: the last token with any mass.
  EXPECT_EQ(qkv::pick_token({0.5, 0.4999999, 0.0}, 0.99999995), 1);
}

TEST(SampleOptions, OutOfRangeValuesThrow) {
  const std::vector<float> l = {0.0f, 1.0f};
  auto expect_throw = [&](SampleOptions o, const std::string& part) {
    try {
      probs(l, o);
      ADD_FAILURE() << "no error for " << part;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  SampleOptions o;
  o.temperature = -1.0;
  expect_throw(o, "temperature");
  o.temperature = NAN;
  expect_throw(o, "temperature");
  o = SampleOptions{};
  o.top_p = 0.0;
  expect_throw(o, "top_p");
  o.top_p = 1.5;
  expect_throw(o, "top_p");
  o.top_p = NAN;
  expect_throw(o, "top_p");
  o = SampleOptions{};
  o.top_k = -1;
  expect_throw(o, "top_k");
}

TEST(SampleOptions, ValidateNamesTheDtypeOutOfRange) {
  auto message = [](const SampleOptions& o) -> std::string {
    try {
      o.validate();
    } catch (const qkv::Error& e) {
      return e.what();
    }
    return "";
  };
  SampleOptions o;
  EXPECT_EQ(message(o), "");
  o.dtype = qkv::DType::f64;
  EXPECT_EQ(message(o), "dtype: expected float32 or bf16, found float64");
  o.dtype = qkv::DType::bf16;
  o.kv_dtype = qkv::DType::boolean;
  EXPECT_EQ(message(o), "kv_dtype: expected float32 or bf16, found bool");
  o.kv_dtype = qkv::DType::f32;
  EXPECT_EQ(message(o), "");
}

namespace {

// A GPT over the vocabulary of "ab" (a = 0, b = 1, unknown = 2) whose
// logits are [0, 0, 10] after any input: every weight is zero except the
// final LayerNorm's bias b = e0 (with zero gain its output is b whatever
// the input) and the unknown token's embedding row 10 e0 (the LM head is
// tied to the embedding, so logit j = b · wte[j]).
qkv::GPT model_favouring_unknown() {
  qkv::GPTConfig cfg;
  cfg.vocab = 3, cfg.context = 8, cfg.layers = 1, cfg.heads = 1, cfg.kv_heads = 1, cfg.embd = 4;
  cfg.bias = true;
  qkv::GPT model(cfg);
  const std::span<float> w = model.weights();
  std::fill(w.begin(), w.end(), 0.0f);
  for (const qkv::ParamInfo& p : model.params()) {
    if (p.name == "transformer.ln_f.bias") w[p.offset] = 1.0f;
    if (p.name == "transformer.wte.weight") w[p.offset + 2 * cfg.embd] = 10.0f;
  }
  return model;
}

}  // namespace

TEST(Sample, NeverDrawsTheUnknownIdEvenWhenTheModelFavoursIt) {
  qkv::GPT model = model_favouring_unknown();
  const qkv::CharTokenizer tok = qkv::CharTokenizer::from_text("ab");
  ASSERT_EQ(tok.unknown_id(), 2);
  const std::vector<int32_t> prompt = {0, 1, 2};
  model.forward(prompt.data(), nullptr, 1, 3);
  const float* last = model.logits() + 2 * 3;
  ASSERT_GT(last[2], last[0] + 9.0f);  // the model does favour it (p ≈ 0.9999 at temperature 1)
  ASSERT_GT(last[2], last[1] + 9.0f);

  struct Case { double temperature; int64_t top_k; double top_p; bool cache; };
  for (const Case c : {Case{1.0, 0, 1.0, true}, Case{1.0, 0, 1.0, false}, Case{3.0, 0, 1.0, true},
                       Case{1.0, 1, 1.0, true}, Case{1.0, 0, 0.5, true}, Case{0.0, 0, 1.0, true}}) {
    SampleOptions o;
    o.prompt = "abz";  // 'z' is unseen: the prompt may hold the unknown id, the output may not
    o.tokens = 50;
    o.temperature = c.temperature, o.top_k = c.top_k, o.top_p = c.top_p, o.use_cache = c.cache;
    o.sliding_window = true;  // 50 tokens past a context of 8
    const std::vector<int32_t> out = qkv::sample(model, tok, o, [](const std::string&) {});
    ASSERT_EQ(out.size(), 50u);
    EXPECT_EQ(std::count(out.begin(), out.end(), tok.unknown_id()), 0)
        << "temperature " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p;
  }
}

TEST(Sample, StopsWhenTheContextIsFullAndSaysSo) {
  // Context 8: the model reads at most 8 tokens, so after a prompt of 3 the
  // 6th generated token is the last (its own position would be 8).
  qkv::GPT model = model_favouring_unknown();
  for (const bool cache : {true, false}) {
    SampleOptions o;
    o.tokens = 50, o.use_cache = cache;
    qkv::StopReason why = qkv::StopReason::tokens;
    std::vector<int32_t> seen;
    const std::vector<int32_t> out =
        qkv::sample_ids(model, {0, 1, 0}, o, {2}, -1, [&](int32_t id) { seen.push_back(id); }, nullptr, &why);
    EXPECT_EQ(out.size(), 6u) << "cache " << cache;
    EXPECT_EQ(seen, out);
    EXPECT_EQ(why, qkv::StopReason::context);
    // Asked for no more than fits: it ends on the count.
    o.tokens = 6;
    qkv::sample_ids(model, {0, 1, 0}, o, {2}, -1, [](int32_t) {}, nullptr, &why);
    EXPECT_EQ(why, qkv::StopReason::tokens);
    // With a sliding window it goes on, reading the last 8 tokens.
    o.tokens = 20, o.sliding_window = true;
    EXPECT_EQ(qkv::sample_ids(model, {0, 1, 0}, o, {2}, -1, [](int32_t) {}, nullptr, &why).size(), 20u);
    EXPECT_EQ(why, qkv::StopReason::tokens);
  }
}

TEST(Sample, RefusesAPromptLongerThanTheContextUnlessSliding) {
  qkv::GPT model = model_favouring_unknown();
  SampleOptions o;
  o.tokens = 2;
  const std::vector<int32_t> nine(9, 0);
  try {
    qkv::sample_ids(model, nine, o, {}, -1, [](int32_t) {});
    ADD_FAILURE() << "a 9-token prompt with a context of 8 was taken";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("prompt: 9 tokens, more than the model's context of 8"), std::string::npos)
        << e.what();
  }
  o.sliding_window = true;
  EXPECT_EQ(qkv::sample_ids(model, nine, o, {}, -1, [](int32_t) {}).size(), 2u);
  // Exactly the context fits: one token follows, and the context is full.
  o.sliding_window = false;
  qkv::StopReason why = qkv::StopReason::tokens;
  EXPECT_EQ(qkv::sample_ids(model, std::vector<int32_t>(8, 0), o, {}, -1, [](int32_t) {}, nullptr, &why).size(), 1u);
  EXPECT_EQ(why, qkv::StopReason::context);
}

TEST(Excluded, SeveralIdsAreAllLeftOut) {
  const std::vector<float> l = {0.0f, 5.0f, 9.0f, 7.0f};
  SampleOptions o;
  o.temperature = 0.0;
  EXPECT_EQ(support(probs(l, o, {2, 3})), (std::vector<int32_t>{1}));
  o.temperature = 1.0;
  const auto p = probs(l, o, {2, 3, 99, -1});  // ids outside [0, V) change nothing
  EXPECT_EQ(p[2] + p[3], 0.0);
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-12);
}
