#include "qkv/optim.h"

#include <algorithm>
#include <cmath>
#include <span>
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

// Elements per chunk of the norm and the update: fixed, so the norm's sum
// runs in the same order for any thread count (each update is independent).
constexpr int64_t kChunk = 8192;

// Σ g_i² in double, in the same order for any thread count: fixed chunks of
// kChunk, each a lane_sum, then the chunks added in order. A plain serial
// double sum over the ~1M gradients was latency-bound and ran on one core.
double sum_of_squares(const float* g, int64_t n) {
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

// The step's float32 constants: the betas, lr, the factor 1 - lr *
// weight_decay, the clipping factor, eps and the bias corrections' reciprocals.
struct AdamWStep {
  float b1, b2, lr, keep, clip, eps, ibc1, ibc2;
};

// The update of n weights, compiled for AVX-512, x86-64-v3 and baseline x86-64 and
// picked when the program loads (GCC function multi-versioning, as gelu.cpp
// does): with the arrays behind restrict, the decay a factor and no errno for
// sqrt (-fno-math-errno, CMakeLists.txt), each version vectorises (the loop
// in step() ran scalar sqrtss and divss: 4.5% of a bf16 training step). FMA
// contraction in the wider versions changes the last bits only.
__attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
void adamw_span(float* __restrict w, float* __restrict m, float* __restrict v,
                const float* __restrict g, const uint8_t* __restrict decay, int64_t n,
                const AdamWStep k) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * k.clip;
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * gi;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * gi * gi;
    // Decoupled weight decay (AdamW): shrink the weight itself, not the
    // gradient, by a factor, as torch.optim.AdamW does; the factor is `keep`
    // or 1, exactly (1 - keep is exact for keep >= 1/2), with no branch.
    const float wi = w[i] * (1.0f - (1.0f - k.keep) * static_cast<float>(decay[i]));
    w[i] = wi - k.lr * (m[i] * k.ibc1) / (std::sqrt(v[i] * k.ibc2) + k.eps);
  }
}

}  // namespace

double AdamW::step(GPT& model, double lr) {
  const std::span<float> w = model.weights();
  const std::vector<float>& g = model.grads();
  const int64_t n = static_cast<int64_t>(w.size());
  const double norm = std::sqrt(sum_of_squares(g.data(), n));
  const double clip = cfg_.grad_clip > 0.0 && norm > cfg_.grad_clip ? cfg_.grad_clip / norm : 1.0;
  ++t_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
  const AdamWStep k{static_cast<float>(cfg_.beta1), static_cast<float>(cfg_.beta2),
                    static_cast<float>(lr), static_cast<float>(1.0 - lr * cfg_.weight_decay),
                    static_cast<float>(clip), static_cast<float>(cfg_.eps),
                    static_cast<float>(1.0 / bc1), static_cast<float>(1.0 / bc2)};
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk;
    adamw_span(w.data() + i, m_.data() + i, v_.data() + i, g.data() + i, decay_.data() + i,
               std::min(kChunk, n - i), k);
  }
  return norm;
}

}  // namespace qkv
