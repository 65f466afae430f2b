// embedding.cpp: token + learned position embeddings, forward and backward.
#include <algorithm>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

// out [B, T, C] = wte [tokens [B, T], C] + wpe [T, C] (wpe may be null)
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static) if (B * T * C >= detail::kParallelMin)
  for (int64_t r = 0; r < B * T; ++r) {
    const float* e = wte + static_cast<int64_t>(tokens[r]) * C;
    float* y = out + r * C;
    if (wpe) {
      const float* p = wpe + (r % T) * C;
      for (int64_t c = 0; c < C; ++c) y[c] = e[c] + p[c];
    } else {
      std::copy(e, e + C, y);
    }
  }
}

// dwte [V, C] += dout rows scattered by token; dwpe [T, C] += dout summed over B.
// A token appears in many rows, so the scatter is split by channels: one
// thread per block of channels, rows in order (no atomics, same bits for any
// thread count).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C) {
  constexpr int64_t CB = detail::kColBlock;
  const int64_t blocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (B * T * C >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lo = blk * CB, n = std::min(CB, C - lo);
    for (int64_t r = 0; r < B * T; ++r) {
      const float* d = dout + r * C + lo;
      float* e = dwte + static_cast<int64_t>(tokens[r]) * C + lo;
      for (int64_t j = 0; j < n; ++j) e[j] += d[j];
      if (dwpe) {
        float* p = dwpe + (r % T) * C + lo;
        for (int64_t j = 0; j < n; ++j) p[j] += d[j];
      }
    }
  }
}

}  // namespace qkv::nn
