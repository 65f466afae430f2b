// attention.cpp: the public entry point. Checks once, allocates the outputs,
// hands the validated problem to a kernel.
#include "qkv/attention.h"

#include "core/shape_checks.h"
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

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& opts) {
  const AttentionProblem p = check_attention_args(q, k, v, opts);
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = p.lead;
    s.insert(s.end(), tail);
    return s;
  };
  AttentionResult res;
  res.out = Tensor(q.dtype(), with({p.Hq, p.N, p.Dv}));
  if (opts.return_weights) res.weights = Tensor(q.dtype(), with({p.Hq, p.N, p.S}));
  if (opts.return_lse) res.lse = Tensor(q.dtype(), with({p.Hq, p.N}));
  ref::attention_forward(res, q, k, v, p, opts.return_weights, opts.return_lse);
  return res;
}

}  // namespace qkv
