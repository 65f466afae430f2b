// attention.cpp: the public entry point. Checks once, allocates the outputs,
// hands the validated problem to the backend the table picks.
#include "qkv/attention.h"

#include "core/ops/attention_backends.h"
#include "core/ops/attention_checks.h"

namespace qkv {

const char* causal_name(Causal c) {
  switch (c) {
    case Causal::none: return "none";
    case Causal::top_left: return "top-left";
    case Causal::bottom_right: return "bottom-right";
  }
  return "?";
}

Causal parse_causal(const std::string& s) {
  for (Causal c : {Causal::none, Causal::top_left, Causal::bottom_right})
    if (s == causal_name(c)) return c;
  throw Error("causal: expected none, top-left or bottom-right, found '" + s + "'");
}

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::reference: return "reference";
    case Kernel::fast: return "fast";
    case Kernel::automatic: return "auto";
  }
  return "?";
}

Kernel parse_kernel(const std::string& s) {
  for (Kernel k : {Kernel::reference, Kernel::fast, Kernel::automatic})
    if (s == kernel_name(k)) return k;
  throw Error("kernel: expected reference, fast or auto, found '" + s + "'");
}

namespace {

AttentionShapes shapes_of(const AttentionProblem& p) {
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = p.lead;
    s.insert(s.end(), tail);
    return s;
  };
  return {with({p.Hq, p.N, p.Dv}), with({p.Hq, p.N, p.S}), with({p.Hq, p.N})};
}

}  // namespace

AttentionShapes attention_shapes(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const AttentionOptions& opts) {
  return shapes_of(check_attention_args(q, k, v, opts));
}

void attention_into(AttentionResult& res, const TensorView& q, const TensorView& k,
                    const TensorView& v, const AttentionOptions& opts) {
  // check_finite's scan of k and v waits for the backend: decode's kernel
  // does it as it reads them (a separate pass would double decode's time);
  // otherwise it runs here, before anything is computed.
  AttentionProblem p = check_attention_args(q, k, v, opts, KvScanTiming::deferred);
  const AttentionBackend* backend = &select_backend(opts.kernel, p);
  KvScan seen;
  if (p.kv_scan_pending) {
    if (backend->scans_kv(p)) {
      p.kv_scan = &seen;
    } else {
      finish_kv_checks(p, k, v);
      backend = &select_backend(opts.kernel, p);
    }
  }
  const int threads = resolve_threads(opts.threads);
  const AttentionShapes shapes = shapes_of(p);
  fit_tensor(res.out, p.out_dtype, shapes.out);
  if (opts.return_weights) fit_tensor(res.weights, p.stats_dtype(), shapes.weights);
  if (opts.return_lse) fit_tensor(res.lse, p.stats_dtype(), shapes.lse);
  backend->forward(res, p, opts.return_weights, opts.return_lse, threads);
  if (p.kv_scan) {
    // A NaN or Inf seen: the whole scan names it and throws. Scores that
    // could leave float32's range: the result is redone on the reference.
    p.kv_scan = nullptr;
    finish_kv_checks(p, k, v, &seen);
    if (!p.scores_fit_f32) select_backend(opts.kernel, p).forward(res, p, opts.return_weights,
                                                                  opts.return_lse, threads);
  }
}

AttentionResult attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const AttentionOptions& opts) {
  AttentionResult res;
  attention_into(res, q, k, v, opts);
  return res;
}

}  // namespace qkv
