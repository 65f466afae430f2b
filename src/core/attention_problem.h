// attention_problem.h: one attention call, validated, as every kernel sees it.
//
// The op (core/ops/attention.cpp) checks its arguments once and hands the
// reference and the fast kernels this description: sizes, the resolved scale
// and the masks in a form they can address directly, so no kernel re-checks
// or re-derives anything. It lives below both the op and the kernels, which
// never include each other.
#pragma once

#include <algorithm>
#include <vector>

#include "qkv/attention.h"

namespace qkv {

// How a mask broadcast to [..., Hq, N, S] is addressed: element (b, h, i, j)
// lives at head_offset[b * Hq + h] + i * stride_n + j * stride_s, where a
// broadcast dim has stride 0.
struct MaskView {
  const Tensor* tensor = nullptr;  // null: no mask
  std::vector<int64_t> head_offset;
  int64_t stride_n = 0;
  int64_t stride_s = 0;
};

struct AttentionProblem {
  Shape lead;           // the leading "..." dims
  int64_t B = 1;        // product of lead
  int64_t Hq = 0, Hkv = 0, N = 0, S = 0, D = 0, Dv = 0;
  int64_t group = 1;    // Hq / Hkv: query heads per key/value head
  double scale = 1.0;
  double softcap = 0.0;  // 0 = off
  Causal causal = Causal::none;
  bool has_window = false;
  SlidingWindow window;
  const std::vector<int64_t>* key_lengths = nullptr;  // [B] or null
  const std::vector<double>* alibi_slopes = nullptr;  // [Hq] or null
  MaskView mask;

  // Query i's diagonal: the key it is aligned with (causal bottom-right
  // aligns the last query with the last key).
  int64_t diag(int64_t i) const { return causal == Causal::bottom_right ? i + S - N : i; }

  // The keys [first, last] of batch b that query i may see under causal,
  // window and key_lengths; empty when first > last. The bool/additive mask
  // may block more inside the range.
  int64_t first_key(int64_t i) const {
    if (has_window && window.left >= 0) return std::max<int64_t>(0, diag(i) - window.left);
    return 0;
  }
  int64_t last_key(int64_t b, int64_t i) const {
    int64_t last = S - 1;
    if (causal != Causal::none) last = std::min(last, diag(i));
    if (has_window && window.right >= 0) last = std::min(last, diag(i) + window.right);
    if (key_lengths) last = std::min(last, (*key_lengths)[b] - 1);
    return last;
  }

  // The score bias ALiBi adds for head h, query i, key j.
  double alibi(int64_t h, int64_t i, int64_t j) const {
    if (!alibi_slopes) return 0.0;
    const int64_t dist = diag(i) - j;
    return -(*alibi_slopes)[h] * static_cast<double>(dist < 0 ? -dist : dist);
  }
};

}  // namespace qkv
