// data_parallel.h: `mpirun -np P qkv train ...`: one model trained by P
// ranks, each on its share of every batch (qkv/data_parallel.h).
#pragma once

#include <atomic>

#include "field_flags.h"
#include "qkv/trainer.h"

namespace qkv::cli {

// True when this process was started by an MPI launcher (mpirun, srun)
// together with other ranks.
bool launched_by_mpi();

// Trains `o` as this rank; rank 0 writes the directory, the log and the
// plot. An error on any rank ends every rank (MPI_Abort) with its message,
// the library's fields named as the command's flags.
// Returns the exit code (128 + the signal when interrupted).
int run_data_parallel(TrainOptions o, const std::atomic<int>& stop_signal, const FieldFlags& flags);

}  // namespace qkv::cli
