#include "sequence_parallel.h"

#include <iostream>

#include "cli_common.h"
#include "field_flags.h"
#include "one_head.h"
#include "qkv/ring_attention.h"

namespace qkv::cli {
namespace {

// MPI for the command's lifetime: started here unless already running.
struct MpiSession {
  bool owner = false;
  MpiSession() {
    int started = 0;
    MPI_Initialized(&started);
    if (!started) MPI_Init(nullptr, nullptr), owner = true;
  }
  ~MpiSession() {
    if (owner) MPI_Finalize();
  }
};

int run(const SequenceParallelArgs& a, int rank, int ranks) {
  if (!a.unsupported.empty())
    throw UsageError("--sequence-parallel: " + a.unsupported +
                     " not supported with it (ring attention takes causal top-left or none, "
                     "--scale, --kernel, --threads, --lse)");
  if (a.causal != "none" && a.causal != "top-left")
    throw UsageError("--sequence-parallel: expected --causal none or top-left, found " + a.causal);
  Tensor q = load_npy_arg("--q", a.q), k = load_npy_arg("--k", a.k), v = load_npy_arg("--v", a.v);
  const bool one_head = lift_one_head(q, k, v);
  if (q.rank() < 3 || q.dim(-2) != k.dim(-2))
    throw Error("--sequence-parallel: self-attention only: q and k must have the same length, found q " +
                shape_str(q.shape()) + ", k " + shape_str(k.shape()));
  const int64_t L = q.dim(-2);
  if (L < 2 * ranks)
    throw Error("--sequence-parallel: " + std::to_string(L) + " positions cannot be split over " +
                std::to_string(ranks) + " ranks (at least 2 each)");
  RingAttentionOptions o;
  o.length = L;
  o.causal = a.causal == "top-left";
  o.scale = a.scale;
  o.kernel = as_usage(kAttentionFlags, [&] { return parse_kernel(a.kernel); });
  o.threads = a.threads;
  AttentionResult res;
  ring_attention_forward(res, ring_scatter(q, o.comm), ring_scatter(k, o.comm), ring_scatter(v, o.comm), o);
  const Tensor out = ring_gather(res.out, L, o.comm);
  Shape rows = res.lse.shape();
  rows.push_back(1);  // lse [..., H, n] gathers as [..., H, n, 1]
  Shape lse_shape = rows;
  lse_shape[lse_shape.size() - 2] = L;
  lse_shape.pop_back();
  const Tensor lse = ring_gather(res.lse.reshaped(rows), L, o.comm).reshaped(lse_shape);
  if (rank != 0) return 0;
  auto as_given = [&](const Tensor& t) { return one_head ? drop_head(t) : t; };
  save_npy_arg("--out", a.out, as_given(out));
  if (!a.lse.empty()) save_npy_arg("--lse", a.lse, as_given(lse));
  std::cout << "out " << shape_str(as_given(out).shape()) << " " << dtype_name(out.dtype()) << " -> "
            << a.out << " (sequence split over " << ranks << " ranks)\n";
  return 0;
}

}  // namespace

int run_sequence_parallel(const SequenceParallelArgs& a) {
  MpiSession mpi;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  try {
    return run(a, rank, ranks);
  } catch (const std::exception& e) {
    const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
    report_error("qkv attention: error: " +
                 (usage ? std::string(e.what()) + " (see 'qkv attention --help')"
                        : "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + ": " +
                              e.what()));
    MPI_Abort(MPI_COMM_WORLD, usage ? kExitUsage : kExitData);
    return usage ? kExitUsage : kExitData;
  }
}

}  // namespace qkv::cli
