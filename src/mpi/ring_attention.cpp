// ring_attention.cpp: sequence-parallel exact attention (qkv/ring_attention.h).
//
// Local tensors are [..., X, n, Y] with this rank's n sequence positions in
// two chunks (ring_partition). Sub-blocks of a chunk are copied out and in
// along the sequence dim (ring_rows.h); the attention itself is qkv's own
// op on each chunk-by-chunk block.
#include "qkv/ring_attention.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "mpi/ring_rows.h"

namespace qkv {
namespace {

struct Ring {
  int rank = 0, ranks = 1;
  explicit Ring(MPI_Comm comm) {
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
  }
  int next() const { return (rank + 1) % ranks; }
  int prev() const { return (rank + ranks - 1) % ranks; }
  // The rank whose key/value block this rank holds at step t.
  int source(int t) const { return (rank - t % ranks + ranks) % ranks; }
};

// One of a rank's two chunks: its global chunk number (0 .. 2P-1, in
// sequence order) and its rows in the rank's local tensors.
struct Chunk {
  int64_t id, begin, size;
};

std::vector<Chunk> chunks_of(int64_t length, int rank, int ranks) {
  const auto parts = ring_partition(length, rank, ranks);
  return {{rank, 0, parts[0].second - parts[0].first},
          {2 * ranks - 1 - rank, parts[0].second - parts[0].first, parts[1].second - parts[1].first}};
}

// How query chunk qc sees key chunk kc under the options: every key, the
// causal diagonal (same chunk), or nothing (a later chunk under causal).
enum class Seen { all, diagonal, none };
Seen seen(const Chunk& qc, const Chunk& kc, bool causal) {
  if (!causal || kc.id < qc.id) return Seen::all;
  return kc.id == qc.id ? Seen::diagonal : Seen::none;
}

AttentionOptions block_options(const RingAttentionOptions& o, Seen s) {
  AttentionOptions a;
  a.scale = o.scale;
  a.causal = s == Seen::diagonal ? Causal::top_left : Causal::none;
  a.kernel = o.kernel;
  a.threads = o.threads;
  a.return_lse = true;
  a.check_finite = false;  // checked once, on the whole local inputs
  return a;
}

MPI_Datatype mpi_type(DType dt) { return dt == DType::f64 ? MPI_DOUBLE : MPI_FLOAT; }

int mpi_count(int64_t n, const char* what) {
  if (n > std::numeric_limits<int>::max())
    throw Error(std::string("ring attention: ") + what + " of " + std::to_string(n) +
                " elements is too large for one MPI message");
  return static_cast<int>(n);
}

// The shape of a local tensor [..., X, n, Y] of rank `src`.
Shape local_shape(const Shape& like, int64_t length, int src, int ranks) {
  Shape s = like;
  s[s.size() - 2] = ring_local_length(length, src, ranks);
  return s;
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const RingAttentionOptions& o,
                  const Ring& ring) {
  if (q.rank() < 3 || k.rank() != q.rank() || v.rank() != q.rank())
    throw Error("ring attention: expected q, k, v of equal rank >= 3 ([..., H, n, D]), found " +
                shape_str(q.shape()) + ", " + shape_str(k.shape()) + ", " + shape_str(v.shape()));
  const int64_t n = ring_local_length(o.length, ring.rank, ring.ranks);
  if (o.length < 2 * ring.ranks)
    throw Error("ring attention: a sequence of " + std::to_string(o.length) + " positions cannot be split over " +
                std::to_string(ring.ranks) + " ranks (at least 2 per rank)");
  for (const Tensor* t : {&q, &k, &v})
    if (t->dim(-2) != n)
      throw Error("ring attention: rank " + std::to_string(ring.rank) + " holds " + std::to_string(n) +
                  " of " + std::to_string(o.length) + " positions, but its q, k, v are " +
                  shape_str(q.shape()) + ", " + shape_str(k.shape()) + ", " + shape_str(v.shape()));
  // The op checks the rest (heads, head dims, dtypes) on the first block;
  // finiteness is checked here once, not per block.
  AttentionOptions probe;
  probe.kernel = o.kernel;
  attention_shapes(q, k, v, probe);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the time since construction to *into (when set): RingStats.
struct Timer {
  double* into;
  double t0 = now();
  ~Timer() {
    if (into) *into += now() - t0;
  }
};

// Non-blocking exchange of buffers around the ring.
struct Exchange {
  explicit Exchange(RingStats* s) : stats(s) {}
  RingStats* stats;
  std::vector<MPI_Request> req;
  // `tag` tells the buffers of one step apart (k, v, dk, dv).
  void start(const Tensor& send, Tensor& recv, int tag, const Ring& ring, MPI_Comm comm) {
    MPI_Request r[2];
    MPI_Irecv(recv.raw(), mpi_count(recv.numel(), "a block"), mpi_type(recv.dtype()), ring.prev(), tag,
              comm, &r[0]);
    MPI_Isend(send.raw(), mpi_count(send.numel(), "a block"), mpi_type(send.dtype()), ring.next(), tag,
              comm, &r[1]);
    req.insert(req.end(), r, r + 2);
    if (stats) stats->bytes_sent += static_cast<int64_t>(send.nbytes());
  }
  void wait() {
    Timer t{stats ? &stats->wait_s : nullptr};
    MPI_Waitall(static_cast<int>(req.size()), req.data(), MPI_STATUSES_IGNORE);
    req.clear();
  }
};

// Starts moving the key/value block on: cur_k, cur_v to the next rank, the
// block of rank `src` (its shapes) into nxt_k, nxt_v.
void pass_kv_on(Exchange& ex, const Tensor& cur_k, const Tensor& cur_v, Tensor& nxt_k, Tensor& nxt_v,
                int src, const RingAttentionOptions& o, const Ring& ring) {
  nxt_k = Tensor(cur_k.dtype(), local_shape(cur_k.shape(), o.length, src, ring.ranks));
  nxt_v = Tensor(cur_v.dtype(), local_shape(cur_v.shape(), o.length, src, ring.ranks));
  ex.start(cur_k, nxt_k, 0, ring, o.comm);
  ex.start(cur_v, nxt_v, 1, ring, o.comm);
}

// f(query chunk, key chunk, how it sees it) for every pair of this rank's
// chunks and the held block's that the mask does not hide entirely.
template <class F>
void for_each_visible_block(const std::vector<Chunk>& mine, const std::vector<Chunk>& theirs,
                            bool causal, F f) {
  for (const Chunk& qc : mine)
    for (const Chunk& kc : theirs)
      if (const Seen s = seen(qc, kc, causal); s != Seen::none) f(qc, kc, s);
}

// Rows [c.begin, c.begin + c.size) of the sequence dim: a view, no copy
// (the op reads inner-contiguous views in place).
TensorView rows_of(const Tensor& t, const Chunk& c, int dim = -2) {
  return TensorView(t).slice(dim, c.begin, c.begin + c.size);
}

// out/lse rows of one query chunk merged with a block's (out_b, lse_b):
//   lse = log(e^lse + e^lse_b), out = e^(lse_old - lse) out + e^(lse_b - lse) out_b.
template <class T>
void merge(Tensor& out, Tensor& lse, const Chunk& qc, const AttentionResult& b) {
  const int64_t n = out.dim(-2), Dv = out.dim(-1), slabs = out.numel() / (n * Dv);
  T* o = out.data<T>();
  T* l = lse.data<T>();
  const T* ob = b.out.data<T>();
  const T* lb = b.lse.data<T>();
  for (int64_t s = 0; s < slabs; ++s)
    for (int64_t i = 0; i < qc.size; ++i) {
      const int64_t row = s * n + qc.begin + i, brow = s * qc.size + i;
      const double la = l[row], lbv = lb[brow];
      if (lbv == -INFINITY) continue;  // the block hid every key of this row
      const double M = std::fmax(la, lbv);
      const double wa = la == -INFINITY ? 0.0 : std::exp(la - M), wb = std::exp(lbv - M);
      const double sum = wa + wb;
      for (int64_t e = 0; e < Dv; ++e)
        o[row * Dv + e] = static_cast<T>((wa * o[row * Dv + e] + wb * ob[brow * Dv + e]) / sum);
      l[row] = static_cast<T>(M + std::log(sum));
    }
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> ring_partition(int64_t length, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks || length < 0)
    throw Error("ring_partition: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                " with length " + std::to_string(length));
  const int64_t chunks = 2 * static_cast<int64_t>(ranks);
  // Chunk c covers [c L / 2P, (c + 1) L / 2P): lengths differ by at most one.
  auto bound = [&](int64_t c) { return c * length / chunks; };
  const int64_t a = rank, b = chunks - 1 - rank;
  return {{bound(a), bound(a + 1)}, {bound(b), bound(b + 1)}};
}

int64_t ring_local_length(int64_t length, int rank, int ranks) {
  int64_t n = 0;
  for (auto [b, e] : ring_partition(length, rank, ranks)) n += e - b;
  return n;
}

Tensor ring_scatter(const Tensor& global, MPI_Comm comm) {
  const Ring ring(comm);
  if (global.rank() < 2) throw Error("ring_scatter: expected [..., L, X], found " + shape_str(global.shape()));
  const int64_t L = global.dim(-2);
  const auto parts = ring_partition(L, ring.rank, ring.ranks);
  Tensor local(global.dtype(), local_shape(global.shape(), L, ring.rank, ring.ranks));
  int64_t at = 0;
  for (auto [b, e] : parts) {
    put_seq_rows(local, at, take_seq_rows(global, b, e - b));
    at += e - b;
  }
  return local;
}

Tensor ring_gather(const Tensor& local, int64_t length, MPI_Comm comm) {
  const Ring ring(comm);
  Shape gshape = local.shape();
  gshape[gshape.size() - 2] = length;
  Tensor global(local.dtype(), gshape);
  // Each rank's local tensor in turn, broadcast by its owner.
  for (int src = 0; src < ring.ranks; ++src) {
    Tensor piece = src == ring.rank ? local
                                    : Tensor(local.dtype(), local_shape(local.shape(), length, src, ring.ranks));
    MPI_Bcast(piece.raw(), mpi_count(piece.numel(), "a gathered tensor"), mpi_type(piece.dtype()), src, comm);
    int64_t at = 0;
    for (auto [b, e] : ring_partition(length, src, ring.ranks)) {
      put_seq_rows(global, b, take_seq_rows(piece, at, e - b));
      at += e - b;
    }
  }
  return global;
}

void ring_attention_forward(AttentionResult& res, const Tensor& q, const Tensor& k, const Tensor& v,
                            const RingAttentionOptions& o) {
  const Ring ring(o.comm);
  check_inputs(q, k, v, o, ring);
  const std::vector<Chunk> mine = chunks_of(o.length, ring.rank, ring.ranks);
  Shape out_shape = q.shape();
  out_shape.back() = v.dim(-1);
  res.out = Tensor(q.dtype(), out_shape);
  Shape lse_shape(q.shape().begin(), q.shape().end() - 1);
  res.lse = Tensor(q.dtype(), lse_shape);
  for (int64_t i = 0; i < res.lse.numel(); ++i) {
    if (q.dtype() == DType::f64)
      res.lse.data<double>()[i] = -INFINITY;
    else
      res.lse.data<float>()[i] = -INFINITY;
  }
  Tensor cur_k = k, cur_v = v, nxt_k, nxt_v;
  for (int t = 0; t < ring.ranks; ++t) {
    Exchange ex{o.stats};
    if (t + 1 < ring.ranks)  // the next block travels while this one is used
      pass_kv_on(ex, cur_k, cur_v, nxt_k, nxt_v, ring.source(t + 1), o, ring);
    const double t0 = now();
    for_each_visible_block(mine, chunks_of(o.length, ring.source(t), ring.ranks), o.causal,
                           [&](const Chunk& qc, const Chunk& kc, Seen s) {
                             const AttentionResult b = attention(rows_of(q, qc), rows_of(cur_k, kc),
                                                                 rows_of(cur_v, kc), block_options(o, s));
                             if (q.dtype() == DType::f64)
                               merge<double>(res.out, res.lse, qc, b);
                             else
                               merge<float>(res.out, res.lse, qc, b);
                           });
    if (o.stats) o.stats->compute_s += now() - t0;
    ex.wait();
    if (t + 1 < ring.ranks) std::swap(cur_k, nxt_k), std::swap(cur_v, nxt_v);
  }
}

void ring_attention_backward(AttentionGrads& g, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const RingAttentionOptions& o) {
  const Ring ring(o.comm);
  check_inputs(q, k, v, o, ring);
  if (out.shape() != dout.shape() || lse.rank() != q.rank() - 1 || lse.dim(-1) != q.dim(-2))
    throw Error("ring attention backward: out " + shape_str(out.shape()) + ", lse " +
                shape_str(lse.shape()) + " and dout " + shape_str(dout.shape()) +
                " do not match q " + shape_str(q.shape()));
  const std::vector<Chunk> mine = chunks_of(o.length, ring.rank, ring.ranks);
  g.dq = Tensor(q.dtype(), q.shape());
  // The travelling block: k, v and the gradients gathered for them so far.
  Tensor cur_k = k, cur_v = v, cur_dk(k.dtype(), k.shape()), cur_dv(v.dtype(), v.shape());
  Tensor nxt_k, nxt_v, nxt_dk, nxt_dv;
  AttentionGrads gb;
  for (int t = 0; t < ring.ranks; ++t) {
    const int src = ring.source(t + 1);
    const bool last = t + 1 == ring.ranks;
    // Keys and values move on while this block's gradients are computed;
    // after the last step only the gradients travel, one more hop, home to
    // the rank that owns those keys.
    Exchange kv{o.stats}, grads{o.stats};
    if (!last) pass_kv_on(kv, cur_k, cur_v, nxt_k, nxt_v, src, o, ring);
    const double t0 = now();
    for_each_visible_block(mine, chunks_of(o.length, ring.source(t), ring.ranks), o.causal,
                           [&](const Chunk& qc, const Chunk& kc, Seen s) {
                             attention_backward_into(gb, rows_of(q, qc), rows_of(cur_k, kc),
                                                     rows_of(cur_v, kc), rows_of(out, qc),
                                                     rows_of(lse, qc, -1), rows_of(dout, qc),
                                                     block_options(o, s));
                             add_seq_rows(g.dq, qc.begin, gb.dq);
                             add_seq_rows(cur_dk, kc.begin, gb.dk);
                             add_seq_rows(cur_dv, kc.begin, gb.dv);
                           });
    if (o.stats) o.stats->compute_s += now() - t0;
    nxt_dk = Tensor(k.dtype(), local_shape(k.shape(), o.length, src, ring.ranks));
    nxt_dv = Tensor(v.dtype(), local_shape(v.shape(), o.length, src, ring.ranks));
    grads.start(cur_dk, nxt_dk, 2, ring, o.comm);
    grads.start(cur_dv, nxt_dv, 3, ring, o.comm);
    kv.wait();
    grads.wait();
    std::swap(cur_dk, nxt_dk), std::swap(cur_dv, nxt_dv);
    if (!last) std::swap(cur_k, nxt_k), std::swap(cur_v, nxt_v);
  }
  g.dk = std::move(cur_dk);
  g.dv = std::move(cur_dv);
}

}  // namespace qkv
