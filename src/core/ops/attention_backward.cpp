// attention_backward.cpp: the public entry point of the backward pass. Checks
// once (the forward's checks plus out, lse and dout), sizes the gradients,
// hands the validated problem to a kernel.
#include <cmath>
#include <cstdio>

#include "core/isa_kernels.h"
#include "core/ops/attention_backends.h"
#include "core/ops/attention_checks.h"
#include "core/ops/attention_operands.h"
#include "qkv/attention.h"
#include "qkv/runtime.h"

namespace qkv {
namespace {

// `t` must be a float tensor of q's dtype and exactly `shape`.
void check_like(const TensorView& t, const char* name, DType dtype, const Shape& shape,
                const char* layout) {
  if (!t || (t.rank() == 0 && t.numel() == 0))
    throw Error(std::string(name) + ": missing; expected " + layout + " = " + shape_str(shape) +
                (std::string(name) == "lse" ? " (run the forward with return_lse = true)" : ""));
  if (t.shape() != shape)
    throw Error(std::string(name) + ": expected shape " + layout + " = " + shape_str(shape) +
                " (from q and v), found " + shape_str(t.shape()));
  if (t.dtype() != dtype)
    throw Error(std::string(name) + ": expected " + dtype_name(dtype) + " (the dtype of q), found " +
                dtype_name(t.dtype()));
}

// lse may be -inf (a row with no visible key), never NaN or +inf. `lse` is
// C-ordered (the op's copy if the caller's was not).
template <class T>
void check_lse_values(const T* lse, const Shape& shape) {
  const int64_t n = shape_numel(shape);
  for (int64_t i = 0; i < n; ++i) {
    const double x = lse[i];
    if (std::isnan(x) || x == INFINITY)
      throw Error("lse: values must be finite or -inf, found " +
                  std::string(std::isnan(x) ? "NaN" : "+inf") + " at " + index_str(shape, i));
  }
}

// out, lse and dout checked against p (a missing one, a wrong shape or
// dtype, and with check_finite NaN or Inf, are qkv::Errors) and given to the
// kernels C-ordered: a strided one is copied once (into p.copies, which
// lives as long as the call). *max_dout: the largest |dout| (0 without
// check_finite).
BackwardInputs checked_inputs(AttentionProblem& p, const TensorView& out, const TensorView& lse,
                              const TensorView& dout, DType out_dt, DType lse_dt, DType dout_dt,
                              const AttentionOptions& opts, double* max_dout) {
  const Shape rows_dv = p.with({p.Hq, p.N, p.Dv});
  check_like(out, "out", out_dt, rows_dv, "[..., Hq, N, Dv]");
  check_like(lse, "lse", lse_dt, p.with({p.Hq, p.N}), "[..., Hq, N]");
  check_like(dout, "dout", dout_dt, rows_dv, "[..., Hq, N, Dv]");
  *max_dout = 0.0;
  if (opts.check_finite) {
    check_finite(out, "out");
    *max_dout = check_finite(dout, "dout");
  }
  BackwardInputs in;
  in.out = contiguous_data(out, p.copies);
  in.out_bf16 = out_dt == DType::bf16;
  in.lse = contiguous_data(lse, p.copies);
  in.dout = contiguous_data(dout, p.copies);
  if (opts.check_finite) {
    if (lse_dt == DType::f32)
      check_lse_values(static_cast<const float*>(in.lse), lse.shape());
    else
      check_lse_values(static_cast<const double*>(in.lse), lse.shape());
  }
  return in;
}

// g's tensors sized in `dt` for q, k and v, then the backend's backward.
void run_backward(AttentionGrads& g, const AttentionProblem& p, const AttentionBackend& backend,
                  const BackwardInputs& in, DType dt, const TensorView& q, const TensorView& k,
                  const TensorView& v, const AttentionOptions& opts) {
  fit_tensor(g.dq, dt, q.shape());
  fit_tensor(g.dk, dt, k.shape());
  fit_tensor(g.dv, dt, v.shape());
  backend.backward(g, p, in, resolve_threads(opts.threads));
}

// bfloat16 inputs, where the CPU has AVX512-BF16 and the fast kernel runs:
// the bf16 backward (kernels/flash_backward_bf16.cpp), q, k and v read in
// place, dout rounded to bf16 if it came as float32 (the forward's
// out_dtype), gradients summed in float32 and rounded to bf16 once, unless
// opts.out_dtype asks for float32 gradients (mixed-precision training keeps
// float32 master gradients).
// Elsewhere (the reference, or a CPU without AVX512-BF16) q, k, v, out and
// dout are widened to float32 once (exactly: a bf16 is a float32's top
// half) and the float32 backward runs on them. The copies are O(N D), never
// N x S. out and dout may be bf16 or float32.
void backward_bf16(AttentionGrads& g, AttentionProblem& p, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView& out, const TensorView& lse,
                   const TensorView& dout, const AttentionOptions& opts) {
  for (const auto& [t, name] : {std::pair{&out, "out"}, std::pair{&dout, "dout"}})
    if (*t && t->dtype() != DType::bf16 && t->dtype() != DType::f32)
      throw Error(std::string(name) + ": expected bfloat16 or float32 (q is bfloat16), found " +
                  dtype_name(t->dtype()));
  if (lse && lse.dtype() != DType::f32)
    throw Error(std::string("lse: expected float32 (the forward's lse for bfloat16 inputs), found ") +
                dtype_name(lse.dtype()));
  const bool f32_grads = opts.out_dtype == DType::f32;
  AttentionGrads g32;
  AttentionGrads& dst = f32_grads ? g : g32;
  const AttentionBackend& backend = select_backend(opts.kernel, p);
  if (backend.kind == Kernel::fast && kernels::isa_kernels(active_isa()).flash_bf16) {
    const DType out_dt = out ? out.dtype() : DType::bf16, dout_dt = dout ? dout.dtype() : DType::bf16;
    double max_dout;
    BackwardInputs in = checked_inputs(p, out, lse, dout, out_dt, DType::f32, dout_dt, opts, &max_dout);
    Tensor dout16;  // the kernel's products take a bf16 dout
    if (dout_dt == DType::f32) {
      if (std::isinf(bf16_to_float(bf16_from_float(static_cast<float>(max_dout))))) {
        char big[32];
        std::snprintf(big, sizeof big, "%.4g", max_dout);
        throw Error(std::string("dout: a value of magnitude ") + big +
                    " overflows bfloat16 (the bf16 backward rounds a float32 dout to bf16, whose "
                    "largest finite value is 3.39e+38)");
      }
      dout16 = dout.contiguous().to(DType::bf16);
      in.dout = dout16.raw();
    }
    run_backward(dst, p, backend, in, DType::f32, q, k, v, opts);
  } else {
    auto widen = [](const TensorView& t) { return t ? t.contiguous().to(DType::f32) : Tensor(); };
    AttentionOptions o32 = opts;
    o32.out_dtype.reset();
    attention_backward_into(dst, widen(q), widen(k), widen(v), widen(out), lse, widen(dout), o32);
  }
  if (!f32_grads) {
    g.dq = g32.dq.to(DType::bf16);
    g.dk = g32.dk.to(DType::bf16);
    g.dv = g32.dv.to(DType::bf16);
  }
}

}  // namespace

void attention_backward_into(AttentionGrads& g, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out, const TensorView& lse,
                             const TensorView& dout, const AttentionOptions& opts) {
  AttentionProblem p = check_attention_args(q, k, v, opts);
  if (p.dtype == DType::bf16) return backward_bf16(g, p, q, k, v, out, lse, dout, opts);
  double max_dout;
  const BackwardInputs in =
      checked_inputs(p, out, lse, dout, p.dtype, p.dtype, p.dtype, opts, &max_dout);
  run_backward(g, p, select_backend(opts.kernel, p), in, p.dtype, q, k, v, opts);
}

}  // namespace qkv
