// backward_cases.h: the cases the fast backward is checked on, float32
// (test_attention_backward_fast.cpp) and bf16 (test_attention_backward_bf16.cpp):
// random problems across the tile and vector edges with every mask kind,
// fixed edge cases, and visible ranges against the same bool mask.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/attention_checks.h"
#include "qkv/attention.h"
#include "random_inputs.h"

namespace backward_cases {

using namespace qkv;
using namespace qkv::test_inputs;

struct Case {
  std::string name;
  Tensor q, k, v, dout;  // float32
  std::optional<Tensor> mask;
  AttentionOptions opts;
  AttentionOptions options(Kernel kernel) const {
    AttentionOptions o = opts;
    o.mask = mask ? TensorView(*mask) : TensorView();
    o.kernel = kernel;
    o.return_lse = true;
    return o;
  }
};

inline std::string describe(const Case& c) {
  std::ostringstream s;
  s << c.name << ": q " << shape_str(c.q.shape()) << " k " << shape_str(c.k.shape()) << " v "
    << shape_str(c.v.shape()) << " causal " << causal_name(c.opts.causal);
  if (c.mask) s << " mask " << dtype_name(c.mask->dtype()) << shape_str(c.mask->shape());
  if (c.opts.window) s << " window " << c.opts.window->left << "," << c.opts.window->right;
  if (!c.opts.key_lengths.empty()) s << " key_lengths";
  if (!c.opts.alibi_slopes.empty()) s << " alibi";
  if (c.opts.softcap > 0) s << " softcap " << c.opts.softcap;
  if (c.opts.scale) s << " scale " << *c.opts.scale;
  s << " threads " << c.opts.threads;
  return s.str();
}

inline Case make_case(std::string name, Shape lead, int64_t Hq, int64_t Hkv, int64_t N, int64_t S,
               int64_t D, int64_t Dv, std::mt19937_64& gen) {
  return Case{std::move(name),
              normal(join(lead, {Hq, N, D}), gen),
              normal(join(lead, {Hkv, S, D}), gen),
              normal(join(lead, {Hkv, S, Dv}), gen),
              normal(join(lead, {Hq, N, Dv}), gen),
              std::nullopt,
              {}};
}

// Sizes around the tile (64) and vector widths (8, 16).
constexpr std::array<int64_t, 6> kSizes = {1, 3, 17, 63, 65, 129};
// Multiply-adds per case, B·Hq·N·S·(D+Dv). The float64 truth (forward and
// backward) and the plain float32 version dominate: 300 cases took 1.4 s on
// all three paths in a Release build on 2 cores.
constexpr int64_t kBudget = 6'000'000;

inline Case random_case(uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(gen); };
  auto size = [&] { return kSizes[uniform(0, kSizes.size() - 1)]; };
  Shape lead;
  int64_t Hkv, group, N, S, D, Dv;
  do {
    lead.assign(uniform(0, 2), 0);
    for (int64_t& d : lead) d = uniform(1, 3);
    Hkv = uniform(1, 3);
    group = std::array{1, 2, 4}[uniform(0, 2)];
    N = size(), S = size(), D = size();
    Dv = chance(0.3) ? D : size();
  } while (shape_numel(lead) * Hkv * group * N * S * (D + Dv) > kBudget);
  const int64_t Hq = Hkv * group, B = shape_numel(lead);
  Case c = make_case("seed " + std::to_string(seed), lead, Hq, Hkv, N, S, D, Dv, gen);
  // 0 none, 1 bool, 2 float32, 3 float64, 4 bool broadcast, 5 float32 broadcast.
  c.mask = random_mask(static_cast<int>(seed % 6), lead, Hq, N, S, gen);
  c.opts.causal = std::array{Causal::none, Causal::top_left, Causal::bottom_right}[(seed / 6) % 3];
  constexpr std::array<int64_t, 7> kSides = {-1, 0, 1, 2, 16, 64, 200};
  if (chance(0.4)) c.opts.window = SlidingWindow{kSides[uniform(0, 6)], kSides[uniform(0, 6)]};
  if (chance(0.3))
    for (int64_t b = 0; b < B; ++b)
      c.opts.key_lengths.push_back(std::array{int64_t{0}, S, uniform(0, S)}[uniform(0, 2)]);
  if (chance(0.3))
    for (int64_t h = 0; h < Hq; ++h)
      c.opts.alibi_slopes.push_back(std::uniform_real_distribution<double>(0, 1)(gen));
  if (chance(0.3)) c.opts.softcap = std::array{1.0, 5.0, 30.0}[uniform(0, 2)];
  if (chance(0.3)) c.opts.scale = std::array{1.0, 0.05, 2.5, -0.7}[uniform(0, 3)];
  c.opts.threads = std::array{0, 1, 3}[uniform(0, 2)];
  return c;
}

// Shapes across the tile edges with every option, and the training shape.
inline std::vector<Case> edge_cases() {
  std::mt19937_64 gen(1);
  std::vector<Case> cs;
  Case mixed = make_case("mixed", {2}, 4, 2, 129, 255, 65, 17, gen);
  mixed.opts.causal = Causal::bottom_right;
  mixed.opts.window = SlidingWindow{40, 3};
  mixed.opts.key_lengths = {200, 0};
  mixed.opts.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  mixed.opts.softcap = 5.0;
  Tensor m(DType::boolean, {129, 1});
  for (int64_t i = 0; i < 129; ++i) m.data<bool>()[i] = i % 7 != 3;
  mixed.mask = std::move(m);
  Case one_group = mixed;  // B x Hkv = 1: two passes on 2 and 3 threads
  one_group.name = "mixed, one key/value head";
  one_group.q = normal({4, 129, 65}, gen);
  one_group.k = normal({1, 255, 65}, gen);
  one_group.v = normal({1, 255, 17}, gen);
  one_group.dout = normal({4, 129, 17}, gen);
  one_group.opts.key_lengths = {};
  cs.push_back(std::move(mixed));
  cs.push_back(std::move(one_group));
  Case causal = make_case("causal, 3 heads", {}, 3, 3, 200, 200, 64, 64, gen);
  causal.opts.causal = Causal::top_left;
  cs.push_back(std::move(causal));
  Case tall = make_case("N > S bottom-right", {}, 2, 1, 129, 17, 8, 8, gen);
  tall.opts.causal = Causal::bottom_right;  // rows 0..111 see nothing
  cs.push_back(std::move(tall));
  Case capped = make_case("softcap bites", {}, 2, 1, 33, 200, 129, 7, gen);
  capped.opts.scale = 2.5;
  capped.opts.softcap = 5.0;
  cs.push_back(std::move(capped));
  // Last panels of 36 and 22 rows: qk's tail of three and two vectors.
  Case tail3 = make_case("N = 100, causal", {}, 2, 2, 100, 100, 48, 40, gen);
  tail3.opts.causal = Causal::top_left;
  cs.push_back(std::move(tail3));
  Case tail2 = make_case("N = 150, window", {}, 2, 1, 150, 160, 24, 24, gen);
  tail2.opts.window = SlidingWindow{30, 10};
  cs.push_back(std::move(tail2));
  Case train = make_case("training shape", {12}, 4, 4, 64, 64, 32, 32, gen);
  train.opts.causal = Causal::top_left;
  cs.push_back(std::move(train));
  cs.push_back(make_case("N = S = D = 1", {}, 1, 1, 1, 1, 1, 1, gen));
  return cs;
}

// Visible ranges that start at key 0 (causal, a window's right side,
// key_lengths): the kernels skip blocks no query sees, which a bool mask of
// the same visibility never does, so the two must agree bit for bit.
inline std::vector<Case> visible_range_cases() {
  std::mt19937_64 gen(7);
  std::vector<Case> cs;
  Case causal = make_case("causal", {}, 2, 2, 100, 100, 32, 32, gen);
  causal.opts.causal = Causal::top_left;
  cs.push_back(std::move(causal));
  Case tall = make_case("bottom-right, GQA", {}, 4, 2, 129, 255, 65, 17, gen);
  tall.opts.causal = Causal::bottom_right;
  cs.push_back(std::move(tall));
  Case right = make_case("right side of a window", {}, 2, 1, 150, 140, 16, 24, gen);
  right.opts.window = SlidingWindow{-1, 3};
  cs.push_back(std::move(right));
  Case padded = make_case("padded", {2}, 2, 1, 70, 130, 16, 24, gen);
  padded.opts.key_lengths = {130, 50};
  cs.push_back(std::move(padded));
  Case train = make_case("training shape", {12}, 4, 4, 64, 64, 32, 32, gen);
  train.opts.causal = Causal::top_left;
  cs.push_back(std::move(train));
  return cs;
}

// `ranged` with its visible range (causal, window, key_lengths) replaced by
// the same visibility as a bool mask, held in `keep`.
inline AttentionOptions as_bool_mask(const Case& c, const AttentionOptions& ranged, Tensor& keep) {
  const AttentionProblem p = check_attention_args(c.q, c.k, c.v, ranged);
  Shape mshape = p.lead;
  mshape.insert(mshape.end(), {1, p.N, p.S});
  keep = Tensor(DType::boolean, mshape);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.N; ++i)
      for (int64_t j = 0; j < p.S; ++j)
        keep.data<bool>()[(b * p.N + i) * p.S + j] = p.first_key(i) <= j && j <= p.last_key(b, i);
  AttentionOptions masked = ranged;
  masked.causal = Causal::none;
  masked.window.reset();
  masked.key_lengths.clear();
  masked.mask = TensorView(keep);
  return masked;
}

}  // namespace backward_cases
