// data_parallel.cpp: the deterministic gradient sum (qkv/data_parallel.h).
#include "qkv/data_parallel.h"

#include <string>

namespace qkv {

GradientSum::GradientSum(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &ranks_);
}

void GradientSum::sum(float* data, int64_t n) {
  if (ranks_ == 1) return;
  if (n / ranks_ > (int64_t{1} << 30))
    throw Error("gradient sum: " + std::to_string(n) + " values are too many for one MPI message");
  // Slice j: [j n / P, (j + 1) n / P), owned by rank j.
  counts_.assign(ranks_, 0);
  displs_.assign(ranks_, 0);
  for (int j = 0; j < ranks_; ++j) {
    displs_[j] = static_cast<int>(j * n / ranks_);
    counts_[j] = static_cast<int>((j + 1) * n / ranks_ - j * n / ranks_);
  }
  const int own = counts_[rank_];
  // Every rank's copy of my slice, rank by rank: [P][own].
  recv_.resize(static_cast<size_t>(own) * ranks_);
  std::vector<int> rcounts(ranks_, own), rdispls(ranks_);
  for (int j = 0; j < ranks_; ++j) rdispls[j] = j * own;
  MPI_Alltoallv(data, counts_.data(), displs_.data(), MPI_FLOAT, recv_.data(), rcounts.data(),
                rdispls.data(), MPI_FLOAT, comm_);
  mine_.resize(own);
  for (int i = 0; i < own; ++i) {
    double s = 0.0;
    for (int j = 0; j < ranks_; ++j) s += recv_[static_cast<size_t>(j) * own + i];  // rank order
    mine_[i] = static_cast<float>(s);
  }
  MPI_Allgatherv(mine_.data(), own, MPI_FLOAT, data, counts_.data(), displs_.data(), MPI_FLOAT, comm_);
}

double GradientSum::sum(double x) {
  if (ranks_ == 1) return x;
  std::vector<double> all(ranks_);
  MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm_);
  double s = 0.0;
  for (double v : all) s += v;  // rank order, on every rank
  return s;
}

}  // namespace qkv

namespace qkv {

TrainOptions data_parallel(TrainOptions o, GradientSum& sum) {
  o.rank = sum.rank();
  o.ranks = sum.ranks();
  if (o.batch % o.ranks != 0)
    throw Error("data parallel: the global batch " + std::to_string(o.batch) +
                " must divide by the " + std::to_string(o.ranks) + " ranks");
  o.sum_over_ranks = [&sum](float* v, int64_t n) { sum.sum(v, n); };
  o.sum_scalar_over_ranks = [&sum](double x) { return sum.sum(x); };
  if (o.rank != 0) o.on_progress = nullptr;  // rank 0 reports
  return o;
}

}  // namespace qkv
