// attention.cpp: the public entry point. Checks once, allocates the outputs,
// hands the validated problem to a kernel.
#include "qkv/attention.h"

#include "core/shape_checks.h"
#include "kernels/flash_forward.h"
#include "qkv/runtime.h"
#include "ref/attention_ref.h"

namespace qkv {

const char* causal_name(Causal c) {
  switch (c) {
    case Causal::none: return "none";
    case Causal::top_left: return "top-left";
    case Causal::bottom_right: return "bottom-right";
  }
  return "?";
}

std::optional<Causal> parse_causal(const std::string& s) {
  for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
    if (s == causal_name(c)) return c;
  return std::nullopt;
}

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::reference: return "reference";
    case Kernel::fast: return "fast";
    case Kernel::automatic: return "auto";
  }
  return "?";
}

std::optional<Kernel> parse_kernel(const std::string& s) {
  for (Kernel k : {Kernel::reference, Kernel::fast, Kernel::automatic})
    if (s == kernel_name(k)) return k;
  return std::nullopt;
}

void attention_into(AttentionResult& res, const Tensor& q, const Tensor& k, const Tensor& v,
                    const AttentionOptions& opts) {
  const AttentionProblem p = check_attention_args(q, k, v, opts);
  Kernel kernel = resolve_kernel(opts.kernel, q.dtype());
  // Scores beyond float32's range are exact only in the reference's double.
  if (kernel == Kernel::fast && scores_may_overflow_f32(p, q, k)) kernel = Kernel::reference;
  const int threads = resolve_threads(opts.threads);
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = p.lead;
    s.insert(s.end(), tail);
    return s;
  };
  fit_tensor(res.out, q.dtype(), with({p.Hq, p.N, p.Dv}));
  if (opts.return_weights) fit_tensor(res.weights, q.dtype(), with({p.Hq, p.N, p.S}));
  if (opts.return_lse) fit_tensor(res.lse, q.dtype(), with({p.Hq, p.N}));
  if (kernel == Kernel::reference) {
    ref::attention_forward(res, q, k, v, p, opts.return_weights, opts.return_lse);
    return;
  }
  kernels::flash_forward(res, q, k, v, p, opts.return_weights, opts.return_lse, threads,
                         active_isa());
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& opts) {
  AttentionResult res;
  attention_into(res, q, k, v, opts);
  return res;
}

}  // namespace qkv
