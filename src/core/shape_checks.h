// shape_checks.h: argument checks done once, at the op boundary.
//
// Every attention kernel (reference now, fast ones later) receives an
// AttentionProblem: the validated sizes, the resolved scale and a flattened
// view of the mask, so kernels never re-check or re-derive anything.
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

// Validates q, k, v and the options (shapes, dtypes, finiteness, mask
// broadcast, scale) and returns the problem description. Throws qkv::Error.
AttentionProblem check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionOptions& opts);

// The kernel that runs: automatic picks fast for float32 and the reference
// for float64; fast with float64 is an error. Shared by forward and backward.
Kernel resolve_kernel(Kernel requested, DType dtype);
// True when a float32 score could leave float32's range: |q·scale|, the
// dot product q·k·scale or the score plus ALiBi and mask, bounded by
// D·max|q|·max|k|·|scale| + max|slope|·(S + N) + max|mask|, reaches FLT_MAX/2.
// The fast kernel computes scores in float32 and would turn such a row into
// inf - inf = NaN and then 0; the reference computes them in double and gets
// them right, so such a problem runs on the reference.
bool scores_may_overflow_f32(const AttentionProblem& p, const Tensor& q, const Tensor& k);

// opts.threads resolved: 0 means all cores; negative is an error.
int resolve_threads(int requested);
// Reuses `t` when it already has this dtype and shape (no allocation, no
// fresh pages to fault in), else replaces it.
void fit_tensor(Tensor& t, DType dtype, const Shape& shape);

// Throws qkv::Error naming `what` and the first index holding NaN or Inf.
void check_finite(const Tensor& t, const char* what);

// The index of flat element i of `shape`, as "[0, 2, 1]".
std::string index_str(const Shape& shape, int64_t i);

}  // namespace qkv
