/// @file
/// qkv/ring_attention.h: exact attention over a sequence split across MPI
/// ranks (ring attention; sequence parallelism).
///
/// Every rank keeps its own queries and passes its keys and values around a
/// ring of the communicator's P ranks: at each of P steps a rank attends its
/// queries to the key/value block it holds (qkv::attention, with its
/// log-sum-exp) while the next block is already on its way (non-blocking
/// send/receive), and merges the partial results by the log-sum-exp rule:
///   lse = log(e^lse_a + e^lse_b),  out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b.
/// No rank ever holds more than two key/value blocks or an N x S matrix.
///
/// The split (ring_partition): the sequence is cut into 2P chunks of nearly
/// equal length and rank r holds chunks r and 2P-1-r, one from each end
/// ("zig-zag"). Under a causal mask the late chunks see the most keys, so
/// pairing an early chunk with a late one gives every rank the same work:
/// at every step but its own, a rank computes exactly two unmasked
/// chunk-by-chunk blocks and skips the two that the mask hides entirely.
///
/// Shapes are qkv/attention.h's, along the local sequence: q [..., Hq, n, D],
/// k [..., Hkv, n, D], v [..., Hkv, n, Dv], where n is this rank's share
/// (ring_local_length). Self-attention only (queries and keys share the
/// split); masks: none or causal top-left, with GQA, scale and kernel as in
/// AttentionOptions. Results equal the single-process kernel's up to float32
/// rounding (the merge adds terms in another order).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "qkv/attention.h"
#include "qkv/export.h"

namespace qkv {

/// The rows [begin, end) of the global sequence held by `rank` of `ranks`,
/// in local order (its early chunk, then its late chunk).
QKV_API std::vector<std::pair<int64_t, int64_t>> ring_partition(int64_t length, int rank,
                                                                int ranks);
/// How many rows of the global sequence `rank` holds (its two chunks).
QKV_API int64_t ring_local_length(int64_t length, int rank, int ranks);

/// This rank's rows of a global tensor [..., L, X] along dim -2 (a copy), and
/// the inverse: every rank's rows gathered back into the global tensor on
/// every rank (MPI_Allgatherv). For loading inputs and checking results.
QKV_API Tensor ring_scatter(const Tensor& global, MPI_Comm comm);
/// The inverse of ring_scatter: the global tensor, on every rank.
QKV_API Tensor ring_gather(const Tensor& local, int64_t length, MPI_Comm comm);

/// Where one call's time went on this rank, for benchmarks and scaling
/// models: compute (the attention blocks and merges), wait (blocked in MPI
/// for a block still in flight: communication the compute did not hide) and
/// the bytes this rank sent.
struct RingStats {
  double compute_s = 0;    ///< seconds in attention blocks and merges
  double wait_s = 0;       ///< seconds blocked on a block still in flight
  int64_t bytes_sent = 0;  ///< bytes this rank sent
};

/// One ring attention call: the communicator, the global sequence and the
/// attention options it supports.
struct RingAttentionOptions {
  MPI_Comm comm = MPI_COMM_WORLD;  ///< the ranks that hold the sequence
  int64_t length = 0;     ///< the global sequence length (sum of every rank's n)
  bool causal = false;    ///< causal top-left over the global positions
  std::optional<double> scale;  ///< default 1/sqrt(D)
  Kernel kernel = Kernel::automatic;  ///< the kernel each block runs
  int threads = 0;        ///< per rank; 0 = all cores
  RingStats* stats = nullptr;  ///< filled (added to) when set
};

/// Forward: fills res.out [..., Hq, n, Dv] and res.lse [..., Hq, n] (the
/// global log-sum-exp of each local query row, which the backward needs).
/// Collective: every rank of opts.comm calls it with the same options.
QKV_API void ring_attention_forward(AttentionResult& res, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const RingAttentionOptions& opts);

/// Backward: given the forward's out and lse and dout = dLoss/dout (local
/// rows), fills this rank's dq, dk, dv. The key/value gradients travel
/// around the ring with their block and arrive home after P steps.
QKV_API void ring_attention_backward(AttentionGrads& g, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const Tensor& dout, const RingAttentionOptions& opts);

}  // namespace qkv
