// sequence_parallel.h: `mpirun -np P qkv attention --sequence-parallel ...`:
// the same attention with the sequence split across P ranks (ring
// attention, qkv/ring_attention.h).
#pragma once

#include <optional>
#include <string>

namespace qkv::cli {

struct SequenceParallelArgs {
  std::string q, k, v, out, lse, causal, kernel;
  std::optional<double> scale;
  int threads = 0;
  // Options ring attention does not take, named for the usage error.
  std::string unsupported;
};

// Every rank reads q, k and v (one shared file system), keeps its rows,
// runs the ring and gathers the result; rank 0 writes the outputs. An error
// on any rank ends every rank (MPI_Abort) with that rank's message, so no
// rank is left waiting for a partner that has gone.
int run_sequence_parallel(const SequenceParallelArgs& a);

}  // namespace qkv::cli
