#include "data_parallel.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli_common.h"
#include "qkv/data_parallel.h"
#include "support/plot.h"

namespace qkv::cli {

bool launched_by_mpi() {
  // Open MPI's mpirun, and PMI-based launchers (Slurm's srun, MPICH).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* v = std::getenv(var); v && std::atoi(v) > 1) return true;
  return false;
}

int run_data_parallel(TrainOptions o, const std::atomic<int>& stop_signal, const FieldFlags& flags) {
  int started = 0;
  MPI_Initialized(&started);
  if (!started) MPI_Init(nullptr, nullptr);
  GradientSum sum(MPI_COMM_WORLD);
  int code = 0;
  try {
    // The library refuses this too; checked here, it is the command line's
    // fault (exit 2), reported once.
    if (o.batch % sum.ranks() != 0)
      throw UsageError("--batch: the global batch " + std::to_string(o.batch) + " must divide by the " +
                       std::to_string(sum.ranks()) + " ranks (each rank runs batch / ranks sequences)");
    const TrainResult r = train(data_parallel(o, sum));
    if (sum.rank() == 0) {
      plot_training_log(o.out_dir + "/log.jsonl", o.out_dir + "/loss.png");
      if (r.interrupted)
        std::fprintf(stderr, "qkv train: interrupted: checkpoint saved at iteration %lld; continue with --resume\n",
                     static_cast<long long>(r.next_iter));
    }
    if (r.interrupted) code = 128 + stop_signal.load();
  } catch (const std::exception& e) {
    // The other ranks may be waiting in a collective for this one: end
    // them all, with this rank's reason.
    const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
    report_error("qkv train: error: " +
                 (usage ? std::string(e.what()) + " (see 'qkv train --help')"
                        : "rank " + std::to_string(sum.rank()) + " of " + std::to_string(sum.ranks()) +
                              ": " + with_flags(e.what(), flags)));
    MPI_Abort(MPI_COMM_WORLD, usage ? kExitUsage : kExitData);
  }
  MPI_Finalize();
  return code == 0 ? 0 : code;
}

}  // namespace qkv::cli
