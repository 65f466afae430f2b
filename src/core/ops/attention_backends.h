// attention_backends.h: the one table the op chooses its kernel from.
//
// Every implementation of attention (the plain reference, the fast CPU path
// for each instruction set; a GPU kernel later) is one row: a name, the
// Kernel option that asks for it, whether it can run a checked problem, and
// its forward and backward. The op and its callers never name a kernel: a
// new backend is a new row here and its own files under src/core.
#pragma once

#include <vector>

#include "core/attention_problem.h"

namespace qkv {

struct AttentionBackend {
  const char* name;  // "reference", "fast" (on active_isa()'s kernels, core/isa_kernels.h)
  Kernel kind;       // the opts.kernel that selects it (automatic takes any)
  // True if this backend can run `p` here and now (its dtype, this CPU's
  // instruction set as chosen by active_isa()).
  bool (*supports)(const AttentionProblem& p);
  // res's tensors already have their dtype and shapes (the op fits them).
  void (*forward)(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                  bool want_lse, int threads);
  // g's tensors already have their dtype and shapes.
  void (*backward)(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                   int threads);
  // True if forward can do check_finite's scan of k and v as it reads them
  // (p.kv_scan): decode, where a separate pass would double the time.
  bool (*scans_kv)(const AttentionProblem& p);
};

// Every backend, in order of preference: the first that matches the request
// and supports the problem runs.
const std::vector<AttentionBackend>& attention_backends();

// The backend for opts.kernel and `p`. Throws qkv::Error when the request
// cannot be met (Kernel::fast with float64).
const AttentionBackend& select_backend(Kernel requested, const AttentionProblem& p);

}  // namespace qkv
