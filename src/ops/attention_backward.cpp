// attention_backward.cpp: the public entry point of the backward pass. Checks
// once (the forward's checks plus out, lse and dout), sizes the gradients,
// hands the validated problem to a kernel.
#include <cmath>

#include "core/shape_checks.h"
#include "kernels/flash_backward.h"
#include "qkv/attention.h"
#include "qkv/runtime.h"
#include "ref/attention_backward_ref.h"

namespace qkv {
namespace {

// `t` must be a float tensor of q's dtype and exactly `shape`.
void check_like(const Tensor& t, const char* name, DType dtype, const Shape& shape,
                const char* layout) {
  if (t.rank() == 0 && t.numel() == 0)
    throw Error(std::string(name) + ": missing; expected " + layout + " = " + shape_str(shape) +
                (std::string(name) == "lse" ? " (run the forward with return_lse = true)" : ""));
  if (t.shape() != shape)
    throw Error(std::string(name) + ": expected shape " + layout + " = " + shape_str(shape) +
                " (from q and v), found " + shape_str(t.shape()));
  if (t.dtype() != dtype)
    throw Error(std::string(name) + ": expected " + dtype_name(dtype) + " (the dtype of q), found " +
                dtype_name(t.dtype()));
}

// lse may be -inf (a row with no visible key), never NaN or +inf.
void check_lse_values(const Tensor& lse) {
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double x = lse.get(i);
    if (std::isnan(x) || x == INFINITY)
      throw Error("lse: values must be finite or -inf, found " +
                  std::string(std::isnan(x) ? "NaN" : "+inf") + " at " + index_str(lse.shape(), i));
  }
}

}  // namespace

void attention_backward_into(AttentionGrads& g, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const AttentionOptions& opts) {
  const AttentionProblem p = check_attention_args(q, k, v, opts);
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = p.lead;
    s.insert(s.end(), tail);
    return s;
  };
  const Shape rows_dv = with({p.Hq, p.N, p.Dv});
  check_like(out, "out", q.dtype(), rows_dv, "[..., Hq, N, Dv]");
  check_like(lse, "lse", q.dtype(), with({p.Hq, p.N}), "[..., Hq, N]");
  check_like(dout, "dout", q.dtype(), rows_dv, "[..., Hq, N, Dv]");
  if (opts.check_finite) {
    check_finite(out, "out");
    check_finite(dout, "dout");
    check_lse_values(lse);
  }
  Kernel kernel = resolve_kernel(opts.kernel, q.dtype());
  // Scores beyond float32's range are exact only in the reference's double.
  if (kernel == Kernel::fast && scores_may_overflow_f32(p, q, k)) kernel = Kernel::reference;
  const int threads = resolve_threads(opts.threads);
  fit_tensor(g.dq, q.dtype(), q.shape());
  fit_tensor(g.dk, q.dtype(), k.shape());
  fit_tensor(g.dv, q.dtype(), v.shape());
  if (kernel == Kernel::reference) {
    ref::attention_backward(g, q, k, v, lse, dout, p);
    return;
  }
  kernels::flash_backward(g, q, k, v, out, lse, dout, p, threads, active_isa());
}

}  // namespace qkv
