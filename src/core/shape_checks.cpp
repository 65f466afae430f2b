#include "core/shape_checks.h"

#include "qkv/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace qkv {
namespace {

bool is_float(DType dt) { return dt == DType::f32 || dt == DType::f64; }

void require_float(const Tensor& t, const char* name) {
  if (!is_float(t.dtype()))
    throw Error(std::string(name) + ": expected float32 or float64, found " + dtype_name(t.dtype()));
}

// Builds the broadcast view of `mask` over target = lead + [Hq, N, S].
MaskView mask_view(const Tensor& mask, const AttentionProblem& p) {
  Shape target = p.lead;
  target.insert(target.end(), {p.Hq, p.N, p.S});
  const int tr = static_cast<int>(target.size());
  const int mr = mask.rank();
  const std::string expected = "a shape broadcastable to " + shape_str(target) +
                               " (that is [..., Hq, N, S])";
  if (mr > tr)
    throw Error("mask: expected " + expected + ", found " + shape_str(mask.shape()) +
                " with more dims");
  // Strides of the mask aligned to target dims from the right; 0 = broadcast.
  std::vector<int64_t> stride(tr, 0);
  int64_t s = 1;
  for (int i = mr - 1; i >= 0; --i) {
    const int t = i + tr - mr;
    const int64_t md = mask.shape()[i];
    if (md != target[t] && md != 1)
      throw Error("mask: expected " + expected + ", found " + shape_str(mask.shape()) +
                  " (dim " + std::to_string(md) + " against " + std::to_string(target[t]) + ")");
    stride[t] = (md == 1) ? 0 : s;
    s *= md;
  }
  if (mask.dtype() != DType::boolean) {
    const int64_t n = mask.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double x = mask.get(i);
      if (std::isnan(x) || x == INFINITY)
        throw Error("mask: additive mask values must be finite or -inf, found " +
                    std::string(std::isnan(x) ? "NaN" : "+inf") + " at " +
                    index_str(mask.shape(), i));
    }
  }
  MaskView view;
  view.tensor = &mask;
  view.stride_n = stride[tr - 2];
  view.stride_s = stride[tr - 1];
  // Offsets of every (batch, head) pair: walk the lead dims and the head dim.
  const int lr = static_cast<int>(p.lead.size());
  view.head_offset.assign(p.B * p.Hq, 0);
  for (int64_t bh = 0; bh < p.B * p.Hq; ++bh) {
    int64_t rem = bh, off = 0;
    off += (rem % p.Hq) * stride[lr];
    rem /= p.Hq;
    for (int d = lr - 1; d >= 0; --d) {
      off += (rem % p.lead[d]) * stride[d];
      rem /= p.lead[d];
    }
    view.head_offset[bh] = off;
  }
  return view;
}

}  // namespace

std::string index_str(const Shape& shape, int64_t i) {
  Shape idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return shape_str(idx);
}

namespace {

// Flat index of the first NaN or Inf among n values, or -1. An exponent of
// all ones is exactly "not finite"; testing the bits keeps the loop free of
// branches, so it vectorises, and blocks run on all threads: this scan runs
// on every attention call and must stay far cheaper than the attention.
template <class T, class Bits>
int64_t first_nonfinite(const T* x, int64_t n, Bits exp_mask) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  int64_t first_bad_block = blocks;
#pragma omp parallel for schedule(static) reduction(min : first_bad_block) if (n > 4 * kBlock)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t end = std::min(n, (blk + 1) * kBlock);
    bool bad = false;
    for (int64_t i = blk * kBlock; i < end; ++i) {
      Bits b;
      std::memcpy(&b, x + i, sizeof b);
      bad |= (b & exp_mask) == exp_mask;
    }
    if (bad) first_bad_block = std::min(first_bad_block, blk);
  }
  if (first_bad_block == blocks) return -1;
  for (int64_t i = first_bad_block * kBlock;; ++i)
    if (!std::isfinite(x[i])) return i;
}

}  // namespace

Kernel resolve_kernel(Kernel requested, DType dtype) {
  if (requested == Kernel::automatic)
    return dtype == DType::f32 ? Kernel::fast : Kernel::reference;
  if (requested == Kernel::fast && dtype != DType::f32)
    throw Error(std::string("kernel fast: expects float32 inputs, found ") + dtype_name(dtype) +
                " (the reference kernel, or auto, handles float64)");
  return requested;
}

bool scores_may_overflow_f32(const AttentionProblem& p, const Tensor& q, const Tensor& k) {
  auto max_abs = [](const Tensor& t) {  // the fast kernel's inputs are float32
    float m = 0.0f;
    const float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(x[i]));
    return static_cast<double>(m);
  };
  const double qmax = max_abs(q), kmax = max_abs(k), scale = std::fabs(p.scale);
  double bias = 0.0;
  if (p.alibi_slopes)
    for (double sl : *p.alibi_slopes)
      bias = std::max(bias, std::fabs(sl) * static_cast<double>(p.S + p.N));
  if (p.mask.tensor && p.mask.tensor->dtype() != DType::boolean) {
    double m = 0.0;  // -inf hides a key; only finite values add to a score
    for (int64_t i = 0; i < p.mask.tensor->numel(); ++i) {
      const double x = p.mask.tensor->get(i);
      if (std::isfinite(x)) m = std::max(m, std::fabs(x));
    }
    bias += m;
  }
  const double score = static_cast<double>(p.D) * qmax * kmax * scale;
  const double limit = 0.5 * static_cast<double>(std::numeric_limits<float>::max());
  return !(qmax * scale < limit && score + bias < limit);
}

int resolve_threads(int requested) {
  if (requested < 0)
    throw Error("threads: expected 0 (all cores) or a positive count, found " +
                std::to_string(requested));
  return requested > 0 ? requested : default_threads();
}

void fit_tensor(Tensor& t, DType dtype, const Shape& shape) {
  if (t.dtype() != dtype || t.shape() != shape) t = Tensor(dtype, shape);
}

void check_finite(const Tensor& t, const char* what) {
  int64_t i = -1;
  if (t.dtype() == DType::f32)
    i = first_nonfinite(t.data<float>(), t.numel(), uint32_t{0x7f800000u});
  else if (t.dtype() == DType::f64)
    i = first_nonfinite(t.data<double>(), t.numel(), uint64_t{0x7ff0000000000000ull});
  if (i < 0) return;
  const double x = t.get(i);
  throw Error(std::string(what) + ": values must be finite, found " +
              (std::isnan(x) ? "NaN" : (x > 0 ? "inf" : "-inf")) + " at " + index_str(t.shape(), i));
}

AttentionProblem check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionOptions& opts) {
  require_float(q, "q");
  require_float(k, "k");
  require_float(v, "v");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw Error(std::string("k, v: expected the dtype of q (") + dtype_name(q.dtype()) +
                "), found k " + dtype_name(k.dtype()) + " and v " + dtype_name(v.dtype()));
  struct Arg { const Tensor* t; const char* name; const char* layout; };
  for (const Arg& a : {Arg{&q, "q", "[..., Hq, N, D]"}, Arg{&k, "k", "[..., Hkv, S, D]"},
                       Arg{&v, "v", "[..., Hkv, S, Dv]"}}) {
    if (a.t->rank() < 3)
      throw Error(std::string(a.name) + ": expected at least 3 dims " + a.layout + ", found " +
                  shape_str(a.t->shape()));
  }
  AttentionProblem p;
  p.lead.assign(q.shape().begin(), q.shape().end() - 3);
  const Shape k_lead(k.shape().begin(), k.shape().end() - 3);
  const Shape v_lead(v.shape().begin(), v.shape().end() - 3);
  if (k_lead != p.lead || v_lead != p.lead)
    throw Error("k, v: expected the leading batch dims of q " + shape_str(p.lead) +
                ", found k " + shape_str(k.shape()) + " and v " + shape_str(v.shape()));
  p.B = shape_numel(p.lead);
  p.Hq = q.dim(-3), p.N = q.dim(-2), p.D = q.dim(-1);
  p.Hkv = k.dim(-3), p.S = k.dim(-2);
  p.Dv = v.dim(-1);
  if (k.dim(-1) != p.D)
    throw Error("k: expected head dim D = " + std::to_string(p.D) + " (from q), found " +
                std::to_string(k.dim(-1)) + " in shape " + shape_str(k.shape()));
  if (v.dim(-3) != p.Hkv || v.dim(-2) != p.S)
    throw Error("v: expected [..., Hkv=" + std::to_string(p.Hkv) + ", S=" + std::to_string(p.S) +
                ", Dv] (from k), found " + shape_str(v.shape()));
  if (p.D == 0) throw Error("q: head dim D must be at least 1, found shape " + shape_str(q.shape()));
  if (p.Dv == 0) throw Error("v: head dim Dv must be at least 1, found shape " + shape_str(v.shape()));
  if (p.N == 0) throw Error("q: query length N must be at least 1, found shape " + shape_str(q.shape()));
  if (p.S == 0) throw Error("k: key length S must be at least 1, found shape " + shape_str(k.shape()));
  if (p.Hq == 0 || p.Hkv == 0)
    throw Error("q, k: head counts must be at least 1, found Hq = " + std::to_string(p.Hq) +
                " and Hkv = " + std::to_string(p.Hkv));
  if (p.B == 0) throw Error("q: leading batch dims must not be empty, found shape " + shape_str(q.shape()));
  if (p.Hq % p.Hkv != 0)
    throw Error("k: query heads Hq = " + std::to_string(p.Hq) +
                " must be a multiple of key/value heads Hkv = " + std::to_string(p.Hkv));
  p.group = p.Hq / p.Hkv;
  if (opts.check_finite) {
    check_finite(q, "q");
    check_finite(k, "k");
    check_finite(v, "v");
  }

  p.scale = opts.scale.value_or(1.0 / std::sqrt(static_cast<double>(p.D)));
  if (!std::isfinite(p.scale))
    throw Error("scale: expected a finite number, found " + std::to_string(p.scale));
  p.causal = opts.causal;
  if (!std::isfinite(opts.softcap) || opts.softcap < 0)
    throw Error("softcap: expected 0 (off) or a positive number, found " + std::to_string(opts.softcap));
  p.softcap = opts.softcap;
  if (opts.window) {
    if (opts.window->left < -1 || opts.window->right < -1)
      throw Error("window: expected sizes >= 0 (or -1 for unbounded), found left " +
                  std::to_string(opts.window->left) + ", right " + std::to_string(opts.window->right));
    p.has_window = true;
    p.window = *opts.window;
    // A side longer than S + N reaches past every key from every diagonal
    // (diag(i) lies in [-N, S + N]), so it is clipped there: the same keys,
    // and diag(i) +- side can no longer overflow int64.
    const int64_t reach = p.S + p.N;
    p.window.left = std::min(p.window.left, reach);
    p.window.right = std::min(p.window.right, reach);
  }
  if (!opts.key_lengths.empty()) {
    if (static_cast<int64_t>(opts.key_lengths.size()) != p.B)
      throw Error("key_lengths: expected one length per batch element (" + std::to_string(p.B) +
                  " for leading dims " + shape_str(p.lead) + "), found " +
                  std::to_string(opts.key_lengths.size()));
    for (size_t b = 0; b < opts.key_lengths.size(); ++b)
      if (opts.key_lengths[b] < 0 || opts.key_lengths[b] > p.S)
        throw Error("key_lengths: expected lengths in [0, S=" + std::to_string(p.S) + "], found " +
                    std::to_string(opts.key_lengths[b]) + " at [" + std::to_string(b) + "]");
    p.key_lengths = &opts.key_lengths;
  }
  if (!opts.alibi_slopes.empty()) {
    if (static_cast<int64_t>(opts.alibi_slopes.size()) != p.Hq)
      throw Error("alibi_slopes: expected one slope per query head (Hq = " + std::to_string(p.Hq) +
                  "), found " + std::to_string(opts.alibi_slopes.size()));
    for (double sl : opts.alibi_slopes)
      if (!std::isfinite(sl)) throw Error("alibi_slopes: expected finite slopes, found " + std::to_string(sl));
    p.alibi_slopes = &opts.alibi_slopes;
  }
  if (opts.mask) p.mask = mask_view(*opts.mask, p);
  return p;
}

}  // namespace qkv
