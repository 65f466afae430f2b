// heads.cpp: moving heads between a row of features and attention's layout.
// Pure copies (no arithmetic), so one routine serves every element type, the
// lessons' MultiHeadAttention and the GPT's fused c_attn alike; each is the
// other's backward.
#include <algorithm>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

namespace {

// Tn rows of D elements, from rows `from_ld` apart to rows `to_ld` apart:
// one head's positions between the rows of features and attention's layout.
template <class T>
void copy_rows(const T* from, int64_t from_ld, T* to, int64_t to_ld, int64_t Tn, int64_t D) {
  for (int64_t t = 0; t < Tn; ++t)
    std::copy(from + t * from_ld, from + t * from_ld + D, to + t * to_ld);
}

// The same, each row's D elements from RoPE's adjacent pairs to halves.
template <class T>
void copy_rows_unpaired(const T* from, int64_t from_ld, T* to, int64_t to_ld, int64_t Tn, int64_t D) {
  for (int64_t t = 0; t < Tn; ++t) detail::unpair_head(from + t * from_ld, to + t * to_ld, D);
}

// The fused row's three parts: slice s of a batch element's Hq + 2 Hkv
// heads is head h of part (q, k or v), whose heads start at column col0.
struct QkvSlice {
  int part;
  int64_t h, col0;
};
QkvSlice qkv_slice(int64_t s, int64_t Hq, int64_t Hkv, int64_t D) {
  if (s < Hq) return {0, s, 0};
  if (s < Hq + Hkv) return {1, s - Hq, Hq * D};
  return {2, s - Hq - Hkv, (Hq + Hkv) * D};
}

}  // namespace

// src [B, T, row], columns col0 + h*D .. + D of each row -> dst [B, H, T, D]
template <class T>
void split_heads(T* dst, const T* src, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t row,
                 int64_t col0) {
#pragma omp parallel for schedule(static) if (B * Tn * H * D >= detail::kParallelMin)
  for (int64_t bh = 0; bh < B * H; ++bh)
    copy_rows(src + bh / H * Tn * row + col0 + bh % H * D, row, dst + bh * Tn * D, D, Tn, D);
}

// src [B, H, T, D] -> dst [B, T, row], columns col0 + h*D .. + D of each row
template <class T>
void merge_heads(T* dst, const T* src, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t row,
                 int64_t col0) {
#pragma omp parallel for schedule(static) if (B * Tn * H * D >= detail::kParallelMin)
  for (int64_t bh = 0; bh < B * H; ++bh)
    copy_rows(src + bh * Tn * D, D, dst + bh / H * Tn * row + col0 + bh % H * D, row, Tn, D);
}

template <class T>
void split_qkv(T* q, T* k, T* v, const T* src, int64_t B, int64_t Tn, int64_t Hq, int64_t Hkv,
               int64_t D, bool qk_paired) {
  const int64_t S = Hq + 2 * Hkv;
  T* parts[3] = {q, k, v};
  const int64_t heads[3] = {Hq, Hkv, Hkv};
#pragma omp parallel for schedule(static) if (B * Tn * S * D >= detail::kParallelMin)
  for (int64_t bs = 0; bs < B * S; ++bs) {
    const int64_t b = bs / S;
    const QkvSlice sl = qkv_slice(bs % S, Hq, Hkv, D);
    (qk_paired && sl.part < 2 ? copy_rows_unpaired<T> : copy_rows<T>)(
        src + b * Tn * S * D + sl.col0 + sl.h * D, S * D, parts[sl.part] + (b * heads[sl.part] + sl.h) * Tn * D, D, Tn,
        D);
  }
}

template <class T>
void merge_qkv(T* dst, const T* q, const T* k, const T* v, int64_t B, int64_t Tn, int64_t Hq,
               int64_t Hkv, int64_t D) {
  const int64_t S = Hq + 2 * Hkv;
  const T* parts[3] = {q, k, v};
  const int64_t heads[3] = {Hq, Hkv, Hkv};
#pragma omp parallel for schedule(static) if (B * Tn * S * D >= detail::kParallelMin)
  for (int64_t bs = 0; bs < B * S; ++bs) {
    const int64_t b = bs / S;
    const QkvSlice sl = qkv_slice(bs % S, Hq, Hkv, D);
    copy_rows(parts[sl.part] + (b * heads[sl.part] + sl.h) * Tn * D, D,
              dst + b * Tn * S * D + sl.col0 + sl.h * D, S * D, Tn, D);
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
template void split_qkv(float*, float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                        int64_t, bool);
template void split_qkv(double*, double*, double*, const double*, int64_t, int64_t, int64_t,
                        int64_t, int64_t, bool);
template void merge_qkv(float*, const float*, const float*, const float*, int64_t, int64_t,
                        int64_t, int64_t, int64_t);
template void merge_qkv(double*, const double*, const double*, const double*, int64_t, int64_t,
                        int64_t, int64_t, int64_t);

}  // namespace qkv::nn
