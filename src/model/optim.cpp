#include "qkv/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/layers/nn_common.h"

namespace qkv {

double learning_rate(int64_t it, double lr, double min_lr, int64_t warmup, int64_t decay_iters) {
  if (it < warmup) return lr * static_cast<double>(it + 1) / static_cast<double>(warmup + 1);
  if (it >= decay_iters) return min_lr;
  const double ratio = static_cast<double>(it - warmup) / static_cast<double>(decay_iters - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

AdamW::AdamW(const GPT& model, const AdamWConfig& cfg)
    : cfg_(cfg), m_(model.num_params(), 0.0f), v_(model.num_params(), 0.0f),
      decay_(model.num_params(), 0) {
  for (const ParamInfo& p : model.params())
    if (p.decay) std::fill(decay_.begin() + p.offset, decay_.begin() + p.offset + p.size, 1);
}

namespace {

// Σ g_i² in double, in the same order for any thread count: fixed chunks of
// kChunk, each a lane_sum, then the chunks added in order. A plain serial
// double sum over the ~1M gradients was latency-bound and ran on one core.
double sum_of_squares(const float* g, int64_t n) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const float* x = g + c * kChunk;
    partial[c] = nn::detail::lane_sum<double>(std::min(kChunk, n - c * kChunk), [x](int64_t i) {
      return static_cast<double>(x[i]) * x[i];
    });
  }
  double sum = 0.0;
  for (double s : partial) sum += s;
  return sum;
}

}  // namespace

double AdamW::step(GPT& model, double lr) {
  std::vector<float>& w = model.weights();
  const std::vector<float>& g = model.grads();
  const int64_t n = static_cast<int64_t>(w.size());
  const double norm = std::sqrt(sum_of_squares(g.data(), n));
  const double clip = cfg_.grad_clip > 0.0 && norm > cfg_.grad_clip ? cfg_.grad_clip / norm : 1.0;
  ++t_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float lr_f = static_cast<float>(lr), decay = static_cast<float>(lr * cfg_.weight_decay);
  const float c = static_cast<float>(clip), eps = static_cast<float>(cfg_.eps);
  const float ibc1 = static_cast<float>(1.0 / bc1), ibc2 = static_cast<float>(1.0 / bc2);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * c;
    m_[i] = b1 * m_[i] + (1.0f - b1) * gi;
    v_[i] = b2 * v_[i] + (1.0f - b2) * gi * gi;
    // Decoupled weight decay (AdamW): shrink the weight itself, not the gradient.
    if (decay_[i]) w[i] -= decay * w[i];
    w[i] -= lr_f * (m_[i] * ibc1) / (std::sqrt(v_[i] * ibc2) + eps);
  }
  return norm;
}

}  // namespace qkv
