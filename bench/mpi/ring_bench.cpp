// ring_bench: one rank's view of ring attention at a given size, for
// bench/mpi_scaling.py (which runs it at P = 1, 2, ... alternately).
//   mpirun -np P ring_bench --length L --heads H --kv-heads G --dim D [--causal]
//                          [--reps R] [--threads T]
// Prints one JSON object (from rank 0): the median call time, the FLOPs of
// the whole problem, and per-rank medians of compute, unhidden wait and
// bytes sent.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qkv/ring_attention.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

qkv::Tensor random_local(qkv::Shape shape, uint64_t seed) {
  qkv::Tensor t(qkv::DType::f32, std::move(shape));
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(gen);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int64_t L = 16384, H = 8, G = 8, D = 64;
  int reps = 5, threads = 1;
  bool causal = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (a == "--length") L = next();
    else if (a == "--heads") H = next();
    else if (a == "--kv-heads") G = next();
    else if (a == "--dim") D = next();
    else if (a == "--reps") reps = static_cast<int>(next());
    else if (a == "--threads") threads = static_cast<int>(next());
    else if (a == "--causal") causal = true;
    else {
      if (rank == 0) std::fprintf(stderr, "ring_bench: unknown option %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  const int64_t n = qkv::ring_local_length(L, rank, ranks);
  // Inputs made on each rank (no scatter): allocated and touched once.
  const qkv::Tensor q = random_local({H, n, D}, 1 + rank), k = random_local({G, n, D}, 100 + rank),
                    v = random_local({G, n, D}, 200 + rank);
  qkv::RingAttentionOptions o;
  o.length = L;
  o.causal = causal;
  o.threads = threads;
  qkv::AttentionResult res;
  qkv::ring_attention_forward(res, q, k, v, o);  // warm-up: pages, scratch
  std::vector<double> wall, compute, wait;
  int64_t bytes = 0;
  for (int r = 0; r < reps; ++r) {
    qkv::RingStats st;
    o.stats = &st;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    qkv::ring_attention_forward(res, q, k, v, o);
    MPI_Barrier(MPI_COMM_WORLD);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    compute.push_back(st.compute_s);
    wait.push_back(st.wait_s);
    bytes = st.bytes_sent;
  }
  // The slowest rank's medians: the job waits for it.
  double mine[3] = {median(compute), median(wait), static_cast<double>(bytes)}, worst[3];
  MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    // q·kᵀ and P·V over the visible pairs: 4 D flops a pair and head.
    const double pairs = causal ? 0.5 * double(L) * double(L + 1) : double(L) * double(L);
    const double flops = 4.0 * double(D) * double(H) * pairs;
    const double t = median(wall);
    std::printf("{\"ranks\": %d, \"length\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"dim\": %lld, "
                "\"causal\": %s, \"threads_per_rank\": %d, \"median_ms\": %.3f, \"gflops\": %.2f, "
                "\"gflops_per_rank\": %.2f, \"compute_ms\": %.3f, \"wait_ms\": %.3f, "
                "\"bytes_sent_per_rank\": %.0f}\n",
                ranks, (long long)L, (long long)H, (long long)G, (long long)D, causal ? "true" : "false",
                threads, t * 1e3, flops / t / 1e9, flops / t / 1e9 / ranks, worst[0] * 1e3,
                worst[1] * 1e3, worst[2]);
  }
  MPI_Finalize();
  return 0;
}
