/// @file
/// qkv/data_parallel.h: training one model on P ranks at once (data
/// parallelism over MPI): every rank holds the whole model, takes its share
/// of each global batch, and the ranks sum their gradients before every
/// optimizer step, so all of them take the same step.
///
/// The sum is deterministic: for a fixed P it never depends on message
/// timing. Rank j owns slice j of the gradient vector; every rank sends
/// slice j to rank j (MPI_Alltoallv), which adds the P contributions in rank
/// order 0, 1, ..., P-1 in double and rounds once, and the summed slices are
/// gathered back to all (MPI_Allgatherv). That is MPI_Allreduce's traffic
/// (2 (P-1)/P of the vector per rank) without its unspecified order. Across
/// different P the partial sums group differently, so losses agree to
/// float32 rounding, not bit for bit.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "qkv/export.h"
#include "qkv/trainer.h"

namespace qkv {

/// Sums over the ranks of an MPI communicator, with results that do not
/// depend on how the ranks' messages arrive.
class QKV_API GradientSum {
 public:
  /// Sums over the ranks of `comm` (collective: every rank constructs one).
  explicit GradientSum(MPI_Comm comm);
  int rank() const { return rank_; }    ///< this process's rank in comm
  int ranks() const { return ranks_; }  ///< the number of ranks in comm
  /// data[i] = sum over ranks of every rank's data[i], in rank order;
  /// collective: every rank calls it with the same n.
  void sum(float* data, int64_t n);
  /// x summed over the ranks, in rank order; collective.
  double sum(double x);

 private:
  MPI_Comm comm_;
  int rank_ = 0, ranks_ = 1;
  std::vector<float> recv_;       ///< the P contributions to this rank's slice
  std::vector<float> mine_;       ///< this rank's summed slice
  std::vector<int> counts_, displs_;
};

/// `o` set up to run as this rank of `comm`: its share of each batch, the
/// gradient and loss sums, and rank 0 alone writing logs and checkpoints.
/// `sum` must outlive the training. Throws qkv::Error if o.batch does not
/// divide by the number of ranks.
QKV_API TrainOptions data_parallel(TrainOptions o, GradientSum& sum);

}  // namespace qkv
