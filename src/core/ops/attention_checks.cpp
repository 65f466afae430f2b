#include "core/ops/attention_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/ops/attention_operands.h"
#include "qkv/runtime.h"

namespace qkv {
namespace {

bool is_float(DType dt) { return dt == DType::f32 || dt == DType::f64 || dt == DType::bf16; }

// A float32 score is bounded by D max|q| max|k| |scale|, plus the largest
// ALiBi bias and additive mask value; where that reaches half of FLT_MAX
// the fast kernel's float32 scores could become inf (and its softmax
// inf - inf = NaN, then 0) while the reference's double stays exact, so
// such a problem runs on the reference. The magnitudes come from the
// finiteness scan; a caller who turns that off vouches for its inputs.
bool scores_fit(const AttentionProblem& p, double max_k) {
  const double scale = std::fabs(p.scale);
  const double limit = 0.5 * static_cast<double>(std::numeric_limits<float>::max());
  return p.max_q * scale < limit && double(p.D) * p.max_q * max_k * scale + p.score_bias < limit;
}

void require_float(const TensorView& t, const char* name) {
  if (!is_float(t.dtype()))
    throw Error(std::string(name) + ": expected float32, float64 or bfloat16, found " +
                dtype_name(t.dtype()));
}

// The results are allocated before any work: sizes the machine cannot hold
// are refused here, with the sizes, rather than by std::bad_alloc later.
void check_result_memory(const AttentionProblem& p, const AttentionOptions& opts) {
  const double rows = static_cast<double>(p.B) * static_cast<double>(p.Hq) * static_cast<double>(p.N);
  const double stats = static_cast<double>(dtype_size(p.stats_dtype()));
  double bytes = rows * static_cast<double>(p.Dv) * static_cast<double>(dtype_size(p.out_dtype));
  if (opts.return_weights) bytes += rows * static_cast<double>(p.S) * stats;
  if (opts.return_lse) bytes += rows * stats;
  // Every call passes here (decode: one per token and layer): the message is
  // built only for a refusal.
  if (memory_shortfall("", bytes).empty()) return;
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = p.lead;
    s.insert(s.end(), tail);
    return shape_str(s);
  };
  std::string what = "out " + with({p.Hq, p.N, p.Dv});
  if (opts.return_weights) what += " and weights " + with({p.Hq, p.N, p.S});
  throw Error(memory_shortfall(what + " " + dtype_name(p.out_dtype), bytes));
}

}  // namespace

int resolve_threads(int requested) {
  check_threads(requested);
  return requested > 0 ? requested : default_threads();
}

void fit_tensor(Tensor& t, DType dtype, const Shape& shape) {
  if (t.dtype() != dtype || t.shape() != shape) t = Tensor(dtype, shape);
}

AttentionProblem check_attention_args(const TensorView& q, const TensorView& k,
                                      const TensorView& v, const AttentionOptions& opts,
                                      KvScanTiming kv_timing) {
  require_float(q, "q");
  require_float(k, "k");
  require_float(v, "v");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw Error(std::string("k, v: expected the dtype of q (") + dtype_name(q.dtype()) +
                "), found k " + dtype_name(k.dtype()) + " and v " + dtype_name(v.dtype()));
  struct Arg { const TensorView* t; const char* name; const char* layout; };
  for (const Arg& a : {Arg{&q, "q", "[..., Hq, N, D]"}, Arg{&k, "k", "[..., Hkv, S, D]"},
                       Arg{&v, "v", "[..., Hkv, S, Dv]"}}) {
    if (a.t->rank() < 3)
      throw Error(std::string(a.name) + ": expected at least 3 dims " + a.layout + ", found " +
                  shape_str(a.t->shape()));
  }
  AttentionProblem p;
  p.dtype = q.dtype();
  p.out_dtype = opts.out_dtype.value_or(p.dtype);
  if (p.out_dtype != p.dtype && !(p.dtype == DType::bf16 && p.out_dtype == DType::f32))
    throw Error(std::string("out_dtype: expected the dtype of q (") + dtype_name(p.dtype) + ")" +
                (p.dtype == DType::bf16 ? " or float32" : "") + ", found " +
                dtype_name(p.out_dtype));
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
  // Empty dims first: an empty k is named as k, not as v disagreeing with it.
  if (p.D == 0) throw Error("q: head dim D must be at least 1, found shape " + shape_str(q.shape()));
  if (p.Dv == 0) throw Error("v: head dim Dv must be at least 1, found shape " + shape_str(v.shape()));
  if (p.N == 0) throw Error("q: query length N must be at least 1, found shape " + shape_str(q.shape()));
  if (p.S == 0) throw Error("k: key length S must be at least 1, found shape " + shape_str(k.shape()));
  if (k.dim(-1) != p.D)
    throw Error("k: expected head dim D = " + std::to_string(p.D) + " (from q), found " +
                std::to_string(k.dim(-1)) + " in shape " + shape_str(k.shape()));
  if (v.dim(-3) != p.Hkv || v.dim(-2) != p.S)
    throw Error("v: expected [..., Hkv=" + std::to_string(p.Hkv) + ", S=" + std::to_string(p.S) +
                ", Dv] (from k), found " + shape_str(v.shape()));
  if (p.Hq == 0 || p.Hkv == 0)
    throw Error("q, k: head counts must be at least 1, found Hq = " + std::to_string(p.Hq) +
                " and Hkv = " + std::to_string(p.Hkv));
  if (p.B == 0) throw Error("q: leading batch dims must not be empty, found shape " + shape_str(q.shape()));
  if (p.Hq % p.Hkv != 0)
    throw Error("k: query heads Hq = " + std::to_string(p.Hq) +
                " must be a multiple of key/value heads Hkv = " + std::to_string(p.Hkv));
  p.group = p.Hq / p.Hkv;
  for (const Arg& a : {Arg{&q, "q", ""}, Arg{&k, "k", ""}, Arg{&v, "v", ""}})
    if (!a.t->raw())
      throw Error(std::string(a.name) + ": null data for shape " + shape_str(a.t->shape()));

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
  if (opts.mask) p.mask = bind_mask(opts.mask, p);
  check_result_memory(p, opts);
  // The finiteness scan reads every input element: it comes after every
  // check of sizes and options, so a bad request fails at once rather than
  // after minutes of scanning (a broadcast view of 2^36 rows).
  double max_q = 0.0, max_k = 0.0;
  if (opts.check_finite) {
    max_q = check_finite(q, "q");
    if (kv_timing == KvScanTiming::now) {
      max_k = check_finite(k, "k");
      check_finite(v, "v");
    }
  }
  // Whether float32 scores are safe (scores_fit above); with the k scan
  // deferred, q's part only until finish_kv_checks.
  if (opts.check_finite && (p.dtype == DType::f32 || p.dtype == DType::bf16)) {
    p.score_bias = p.mask.max_abs_add;
    if (p.alibi_slopes)
      for (double sl : *p.alibi_slopes)
        p.score_bias = std::max(p.score_bias, std::fabs(sl) * double(p.S + p.N));
    p.max_q = max_q;
    p.scores_fit_f32 = scores_fit(p, max_k);
  }
  p.kv_scan_pending = opts.check_finite && kv_timing == KvScanTiming::deferred;
  bind_inputs(p, q, k, v);
  return p;
}

void finish_kv_checks(AttentionProblem& p, const TensorView& k, const TensorView& v,
                      const KvScan* seen) {
  if (!p.kv_scan_pending) return;
  p.kv_scan_pending = false;
  if (seen && !seen->bad) return;  // every score and output the kernel made was finite
  // The whole scan names the first NaN or Inf (and throws).
  const double max_k = check_finite(k, "k");
  check_finite(v, "v");
  if (p.dtype == DType::f32 || p.dtype == DType::bf16)
    // After a kernel's report with finite inputs: its float32 overflowed.
    p.scores_fit_f32 = seen ? false : scores_fit(p, max_k);
}

}  // namespace qkv
