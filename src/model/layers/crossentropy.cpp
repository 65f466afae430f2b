// crossentropy.cpp: softmax + cross-entropy over the vocabulary, forward and
// backward. Plain loops (float64) and a threaded float32 path.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

// ---- plain loops ---------------------------------------------------------

namespace ref {

template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                          int64_t BT, int64_t V) {
  for (int64_t r = 0; r < BT; ++r) {
    const T* z = logits + r * V;
    T m = z[0];
    for (int64_t v = 1; v < V; ++v) m = std::max(m, z[v]);
    T sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - m);
    for (int64_t v = 0; v < V; ++v) probs[r * V + v] = std::exp(z[v] - m) / sum;
    // -log p[t] = log Σ exp(z - m) - (z[t] - m): finite even when p[t] underflows.
    losses[r] = std::log(sum) - (z[targets[r]] - m);
  }
}

template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                           int64_t BT, int64_t V) {
  for (int64_t r = 0; r < BT; ++r)
    for (int64_t v = 0; v < V; ++v)
      dlogits[r * V + v] += (probs[r * V + v] - (v == targets[r] ? T(1) : T(0))) * dloss;
}

template void crossentropy_forward(float*, float*, const float*, const int32_t*, int64_t, int64_t);
template void crossentropy_forward(double*, double*, const double*, const int32_t*, int64_t,
                                   int64_t);
template void crossentropy_backward(float*, const float*, const int32_t*, float, int64_t, int64_t);
template void crossentropy_backward(double*, const double*, const int32_t*, double, int64_t,
                                    int64_t);

}  // namespace ref

// ---- float32: rows on threads ------------------------------------------------

namespace {

// probs [BT, V] = softmax(logits [BT, V]); losses [BT] = -log probs [target]
void fast_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                  int64_t BT, int64_t V) {
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
void fast_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                   int64_t BT, int64_t V) {
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

}  // namespace

// ---- the layer ---------------------------------------------------------------

template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                          int64_t BT, int64_t V) {
  if constexpr (std::is_same_v<T, float>)
    fast_forward(losses, probs, logits, targets, BT, V);
  else
    ref::crossentropy_forward(losses, probs, logits, targets, BT, V);
}

template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                           int64_t BT, int64_t V) {
  if constexpr (std::is_same_v<T, float>)
    fast_backward(dlogits, probs, targets, dloss, BT, V);
  else
    ref::crossentropy_backward(dlogits, probs, targets, dloss, BT, V);
}

template void crossentropy_forward(float*, float*, const float*, const int32_t*, int64_t, int64_t);
template void crossentropy_forward(double*, double*, const double*, const int32_t*, int64_t,
                                   int64_t);
template void crossentropy_backward(float*, const float*, const int32_t*, float, int64_t, int64_t);
template void crossentropy_backward(double*, const double*, const int32_t*, double, int64_t,
                                    int64_t);

}  // namespace qkv::nn
