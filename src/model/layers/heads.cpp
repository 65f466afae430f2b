// heads.cpp: moving heads between a row of features and attention's layout.
// Pure copies (no arithmetic), so one routine serves every element type, the
// lessons' MultiHeadAttention and the GPT's fused c_attn alike; each is the
// other's backward.
#include <algorithm>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

// src [B, T, row], columns col0 + h*D .. + D of each row -> dst [B, H, T, D]
template <class T>
void split_heads(T* dst, const T* src, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t row,
                 int64_t col0) {
#pragma omp parallel for schedule(static) if (B * Tn * H * D >= detail::kParallelMin)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t t = 0; t < Tn; ++t) {
      const T* s = src + (b * Tn + t) * row + col0 + h * D;
      std::copy(s, s + D, dst + (bh * Tn + t) * D);
    }
  }
}

// src [B, H, T, D] -> dst [B, T, row], columns col0 + h*D .. + D of each row
template <class T>
void merge_heads(T* dst, const T* src, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t row,
                 int64_t col0) {
#pragma omp parallel for schedule(static) if (B * Tn * H * D >= detail::kParallelMin)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t t = 0; t < Tn; ++t) {
      const T* s = src + (bh * Tn + t) * D;
      std::copy(s, s + D, dst + (b * Tn + t) * row + col0 + h * D);
    }
  }
}

template void split_heads(float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t);
template void split_heads(double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t);
template void merge_heads(float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t);
template void merge_heads(double*, const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t);

}  // namespace qkv::nn
