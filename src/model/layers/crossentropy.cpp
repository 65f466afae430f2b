// crossentropy.cpp: softmax + cross-entropy over the vocabulary, forward and backward.
#include <algorithm>
#include <cmath>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

// probs [BT, V] = softmax(logits [BT, V]); losses [BT] = -log probs [target]
void crossentropy_forward(float* losses, float* probs, const float* logits,
                          const int32_t* targets, int64_t BT, int64_t V) {
#pragma omp parallel for schedule(static) if (BT * V >= detail::kParallelMin)
  for (int64_t r = 0; r < BT; ++r) {
    const float* z = logits + r * V;
    float* p = probs + r * V;
    const float m = *std::max_element(z, z + V);
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
      p[v] = std::exp(z[v] - m);
      sum += p[v];
    }
    for (int64_t v = 0; v < V; ++v) p[v] /= sum;
    // -log p[t] = log Σ exp(z - m) - (z[t] - m): the same number, but finite
    // even when p[t] rounds to 0.
    losses[r] = std::log(sum) - (z[targets[r]] - m);
  }
}

// dlogits [BT, V] += (probs - onehot(targets)) · dloss
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           float dloss, int64_t BT, int64_t V) {
#pragma omp parallel for schedule(static) if (BT * V >= detail::kParallelMin)
  for (int64_t r = 0; r < BT; ++r) {
    const float* p = probs + r * V;
    float* d = dlogits + r * V;
    const int64_t t = targets[r];
    // (p - 1) is exact for p ≥ 0.5, so the target's gradient keeps its digits
    // when p is near 1, as p · dloss - dloss would not.
    for (int64_t v = 0; v < V; ++v) d[v] += (p[v] - (v == t ? 1.0f : 0.0f)) * dloss;
  }
}

}  // namespace qkv::nn
