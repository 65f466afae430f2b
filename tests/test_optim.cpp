// AdamW (qkv/optim.h) against a plain float64 transcription of its update
// (PyTorch's AdamW with nanoGPT's decay groups and global-norm clipping), and
// the same bits for any thread count (its gradient norm is summed in
// parallel, in fixed chunks).
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "qkv/gpt.h"
#include "qkv/optim.h"
#include "qkv/rng.h"

namespace qkv {
namespace {

// 22890 parameters: not a multiple of the norm's 8 lanes, so its tail runs.
GPTConfig small() {
  GPTConfig c;
  c.vocab = 23;
  c.context = 15;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 2;
  c.embd = 30;
  return c;
}

// Gradients of a few sizes: large enough that clipping engages at 1.0.
void fill_grads(GPT& m, uint64_t seed, double sd) {
  NumpyGenerator rng(seed);
  for (float& g : m.grads()) g = static_cast<float>(rng.normal(0.0, sd));
}

TEST(AdamW, FollowsTheFloat64UpdateAndClips) {
  GPT m(small());
  m.init(3);
  AdamWConfig cfg;  // betas, eps, weight decay 0.1, clip 1.0: the trainer's defaults
  AdamW opt(m, cfg);
  const int64_t n = m.num_params();
  ASSERT_EQ(n, 22890);
  std::vector<double> w(m.weights().begin(), m.weights().end()), mo(n, 0.0), v(n, 0.0);
  std::vector<bool> decay(n, false);
  for (const ParamInfo& p : m.params())
    for (int64_t i = 0; i < p.size; ++i) decay[p.offset + i] = p.decay;
  for (int step = 1; step <= 3; ++step) {
    fill_grads(m, 10 + step, step == 2 ? 1e-4 : 0.05);  // step 2: below the clip
    const std::vector<float> g(m.grads().begin(), m.grads().end());
    const double lr = 1e-3 * step;
    double sq = 0.0;
    for (float x : g) sq += static_cast<double>(x) * x;
    const double norm = std::sqrt(sq);
    EXPECT_NEAR(opt.step(m, lr), norm, 1e-12 * norm) << "step " << step;
    EXPECT_EQ(norm > cfg.grad_clip, step != 2) << "the case meant to clip did not (or the reverse)";
    const double clip = norm > cfg.grad_clip ? cfg.grad_clip / norm : 1.0;
    const double bc1 = 1.0 - std::pow(cfg.beta1, step), bc2 = 1.0 - std::pow(cfg.beta2, step);
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i] * clip;
      mo[i] = cfg.beta1 * mo[i] + (1.0 - cfg.beta1) * gi;
      v[i] = cfg.beta2 * v[i] + (1.0 - cfg.beta2) * gi * gi;
      if (decay[i]) w[i] -= lr * cfg.weight_decay * w[i];
      w[i] -= lr * (mo[i] / bc1) / (std::sqrt(v[i] / bc2) + cfg.eps);
      worst = std::max(worst, std::abs(m.weights()[i] - w[i]));
    }
    // float32 state: each update moves a weight by at most ~lr, rounded at 2^-24 relative.
    EXPECT_LT(worst, 1e-6) << "step " << step;
  }
}

TEST(AdamW, SameBitsForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  std::vector<float> first;
  double first_norm = 0.0;
  for (int threads : {1, 2, 3, 8}) {
    omp_set_num_threads(threads);
    GPT m(small());
    m.init(4);
    AdamW opt(m, AdamWConfig{});
    double norm = 0.0;
    for (int step = 0; step < 2; ++step) {
      fill_grads(m, 20 + step, 0.05);
      norm = opt.step(m, 1e-3);
    }
    if (first.empty()) {
      first.assign(m.weights().begin(), m.weights().end()), first_norm = norm;
      continue;
    }
    EXPECT_EQ(std::memcmp(&norm, &first_norm, sizeof norm), 0) << threads << " threads";
    EXPECT_EQ(std::memcmp(m.weights().data(), first.data(), first.size() * sizeof(float)), 0)
        << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace qkv
