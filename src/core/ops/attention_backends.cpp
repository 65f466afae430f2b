#include "core/ops/attention_backends.h"

#include <string>

#include "core/isa_kernels.h"
#include "core/kernels/flash_backward.h"
#include "core/kernels/flash_forward.h"
#include "core/kernels/flash_tiles.h"
#include "core/ref/attention_backward_ref.h"
#include "core/ref/attention_ref.h"
#include "qkv/runtime.h"

namespace qkv {
namespace {

// The fast CPU path: float32 and bfloat16, on the kernels of the path
// active_isa() names (QKV_ISA or set_isa() force one; tests run each).
bool fast_supports(const AttentionProblem& p) {
  return (p.dtype == DType::f32 || p.dtype == DType::bf16) && p.scores_fit_f32;
}

void fast_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                  bool want_lse, int threads) {
  kernels::flash_forward(res, p, want_weights, want_lse, threads,
                         kernels::isa_kernels(active_isa()));
}

void fast_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                   int threads) {
  const kernels::IsaKernels& isa = kernels::isa_kernels(active_isa());
  if (p.dtype == DType::bf16)
    kernels::flash_backward_bf16(g, p, in, threads, isa);
  else
    kernels::flash_backward(g, p, in, threads, isa);
}

// Decode reads every visible K and V row once, straight from memory.
bool fast_scans_kv(const AttentionProblem& p) { return p.N <= kernels::kDecodeRows; }

bool ref_supports(const AttentionProblem&) { return true; }
bool ref_scans_kv(const AttentionProblem&) { return false; }

// The reference is single-threaded: plain loops are its point.
void ref_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                 bool want_lse, int) {
  ref::attention_forward(res, p, want_weights, want_lse);
}

void ref_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in, int) {
  ref::attention_backward(g, p, in);
}

}  // namespace

const std::vector<AttentionBackend>& attention_backends() {
  static const std::vector<AttentionBackend> table = {
      {"fast", Kernel::fast, fast_supports, fast_forward, fast_backward, fast_scans_kv},
      {"reference", Kernel::reference, ref_supports, ref_forward, ref_backward, ref_scans_kv},
  };
  return table;
}

const AttentionBackend& select_backend(Kernel requested, const AttentionProblem& p) {
  if (requested == Kernel::fast && p.dtype == DType::f64)
    throw Error(std::string("kernel fast: expects float32 or bfloat16 inputs, found ") + dtype_name(p.dtype) +
                " (the reference kernel, or auto, handles float64)");
  // Scores beyond float32's range are exact only in the reference's double:
  // never a silent zero from the fast kernel, whatever was asked for.
  if (requested == Kernel::fast && !p.scores_fit_f32) requested = Kernel::reference;
  for (const AttentionBackend& b : attention_backends())
    if ((requested == Kernel::automatic || b.kind == requested) && b.supports(p)) return b;
  throw Error(std::string("kernel ") + kernel_name(requested) + ": no backend runs " +
              dtype_name(p.dtype) + " inputs on this machine");
}

}  // namespace qkv
