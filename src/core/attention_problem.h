// attention_problem.h: one attention call, validated, as every kernel sees it.
//
// The op (core/ops/attention.cpp) checks its arguments once and hands the
// reference and the fast kernels this description: sizes, the resolved scale,
// where each head of q, k and v lives, and the mask in a form they can
// address directly, so no kernel re-checks or re-derives anything. It lives
// below both the op and the kernels, which never include each other.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "qkv/attention.h"

namespace qkv {

// An input [..., H, L, E] as the kernels read it, in place: row r (< L) of
// head bh = b * H + h starts at data + head_offset[bh] + r * row_stride
// (elements of the input's dtype) and its E elements are contiguous. Lead and
// head strides are folded into head_offset once, so a kernel's per-row
// address is one multiply-add, as it was for C-ordered inputs.
struct HeadRows {
  const void* data = nullptr;
  std::vector<int64_t> head_offset;  // [B * H]
  int64_t row_stride = 0;

  template <class T>
  const T* head(int64_t bh) const {
    return static_cast<const T*>(data) + head_offset[bh];
  }
  template <class T>
  const T* row(int64_t bh, int64_t r) const {
    return head<T>(bh) + r * row_stride;
  }
};

// The mask broadcast to [..., Hq, N, S], typed once at the op boundary:
// exactly one pointer is set (none without a mask), so the kernels choose
// their mask loop once per tile, never per score. Element (b, h, i, j) lives
// at head_offset[b * Hq + h] + i * stride_n + j * stride_s; a broadcast dim
// has stride 0.
struct MaskView {
  const bool* keep = nullptr;      // bool mask: true = may attend
  const float* add_f32 = nullptr;  // additive float32 mask
  const double* add_f64 = nullptr;  // additive float64 mask
  std::vector<int64_t> head_offset;  // [B * Hq]
  int64_t stride_n = 0;
  int64_t stride_s = 0;
  double max_abs_add = 0.0;  // largest finite |value| of an additive mask

  bool present() const { return keep || add_f32 || add_f64; }
  // For plain loops (the reference, tests): element m hides the key (bool
  // mask), and what it adds to the score (additive mask; 0 for bool).
  bool hides(int64_t m) const { return keep && !keep[m]; }
  double bias(int64_t m) const { return add_f32 ? add_f32[m] : add_f64 ? add_f64[m] : 0.0; }
};

// The forward's results that the backward reads, C-ordered (the op copies a
// strided out, lse or dout once), in q's dtype; for bf16 inputs lse is
// float32, dout bf16 and out either.
struct BackwardInputs {
  const void* out = nullptr;   // [..., Hq, N, Dv]
  const void* lse = nullptr;   // [..., Hq, N]
  const void* dout = nullptr;  // [..., Hq, N, Dv]
  bool out_bf16 = false;       // bf16 inputs: out holds bf16 (else float32); dout is bf16
};

// What a kernel saw while it read k and v, when check_finite is fused into
// it (decode): whether any raw score or output was NaN or Inf. That happens
// when a key or value it read holds a NaN or Inf, or when a score or an
// accumulator left float32's range; the op then tells the two apart.
struct KvScan {
  bool bad = false;
};

struct AttentionProblem {
  AttentionProblem() = default;
  // Move-only: q, k and v may point into `copies`, which a copy would not share.
  AttentionProblem(AttentionProblem&&) = default;
  AttentionProblem& operator=(AttentionProblem&&) = default;
  AttentionProblem(const AttentionProblem&) = delete;
  AttentionProblem& operator=(const AttentionProblem&) = delete;

  DType dtype = DType::f32;      // of q, k and v
  DType out_dtype = DType::f32;  // of out: q's, or float32 for bfloat16 inputs
  // lse, weights and the gradients: q's dtype, float32 for bfloat16 inputs
  // (they are computed in float32 and rounding them gains nothing).
  DType stats_dtype() const { return dtype == DType::bf16 ? DType::f32 : dtype; }
  Shape lead;           // the leading "..." dims
  // lead followed by `tail`: the shape of a [..., tail] tensor of this problem.
  Shape with(std::initializer_list<int64_t> tail) const {
    Shape s = lead;
    s.insert(s.end(), tail);
    return s;
  }
  int64_t B = 1;        // product of lead
  int64_t Hq = 0, Hkv = 0, N = 0, S = 0, D = 0, Dv = 0;
  int64_t group = 1;    // Hq / Hkv: query heads per key/value head
  double scale = 1.0;
  double softcap = 0.0;  // 0 = off
  // False when a float32 score could leave float32's range (see
  // check_attention_args): the fast kernel then does not run the problem.
  bool scores_fit_f32 = true;
  // check_finite with the k and v scan left for later (KvScanTiming::deferred):
  // scores_fit_f32 then covers q only until finish_kv_checks runs. max_q and
  // score_bias are kept for it.
  bool kv_scan_pending = false;
  double max_q = 0.0, score_bias = 0.0;
  // Non-null when the kernel checks what it reads (and reports here); it
  // reads only the keys some query can see.
  KvScan* kv_scan = nullptr;
  Causal causal = Causal::none;
  bool has_window = false;
  SlidingWindow window;
  const std::vector<int64_t>* key_lengths = nullptr;  // [B] or null
  const std::vector<double>* alibi_slopes = nullptr;  // [Hq] or null
  MaskView mask;
  HeadRows q;  // [..., Hq, N, D]
  HeadRows k;  // [..., Hkv, S, D]
  HeadRows v;  // [..., Hkv, S, Dv]
  // Inputs the op had to copy (an input whose last dim is strided); q, k or
  // v point into them. Moving the problem keeps those pointers valid.
  std::vector<Tensor> copies;

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
