// Ring attention (qkv/ring_attention.h) under mpirun against the
// single-process op: every rank builds the same global q, k, v (same seed),
// runs the op on all of them, runs ring attention on its own rows, and
// compares. CTest runs this binary with -np 2 and -np 4 --oversubscribe.
#include <mpi.h>

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "qkv/ring_attention.h"
#include "random_inputs.h"

namespace qkv {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

// max |a - b| / (1 + |b|) over the elements.
double worst(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double w = 0;
  for (int64_t i = 0; i < a.numel() && a.shape() == b.shape(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::isinf(y) && x == y) continue;
    w = std::fmax(w, std::fabs(x - y) / (1 + std::fabs(y)));
  }
  return w;
}

struct Case {
  Shape lead;
  int64_t Hq, Hkv, L, D, Dv;
  bool causal;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "lead " << shape_str(c.lead) << " Hq " << c.Hq << " Hkv " << c.Hkv << " L " << c.L << " D "
      << c.D << " Dv " << c.Dv << (c.causal ? " causal" : "");
}

class Ring : public ::testing::TestWithParam<Case> {};

TEST_P(Ring, ForwardAndBackwardEqualTheSingleProcessOp) {
  const Case c = GetParam();
  std::mt19937_64 gen(1234);  // the same on every rank
  const Tensor q = test_inputs::normal(test_inputs::join(c.lead, {c.Hq, c.L, c.D}), gen);
  const Tensor k = test_inputs::normal(test_inputs::join(c.lead, {c.Hkv, c.L, c.D}), gen);
  const Tensor v = test_inputs::normal(test_inputs::join(c.lead, {c.Hkv, c.L, c.Dv}), gen);
  const Tensor dout = test_inputs::normal(test_inputs::join(c.lead, {c.Hq, c.L, c.Dv}), gen);

  AttentionOptions one;
  one.causal = c.causal ? Causal::top_left : Causal::none;
  one.return_lse = true;
  one.threads = 1;
  const AttentionResult whole = attention(q, k, v, one);
  AttentionGrads gw;
  attention_backward_into(gw, q, k, v, whole.out, whole.lse, dout, one);

  RingAttentionOptions ro;
  ro.length = c.L;
  ro.causal = c.causal;
  ro.threads = 1;
  const Tensor ql = ring_scatter(q, ro.comm), kl = ring_scatter(k, ro.comm), vl = ring_scatter(v, ro.comm);
  AttentionResult r;
  ring_attention_forward(r, ql, kl, vl, ro);
  // Every rank's rows, gathered, equal the whole op's (float32 rounding:
  // the partial results merge in another order than one softmax sums).
  EXPECT_LT(worst(ring_gather(r.out, c.L, ro.comm), whole.out), 2e-6) << "rank " << world_rank();
  // lse [..., Hq, n] gathers as rows of one element: [..., Hq, n, 1].
  const Tensor lse_rows = r.lse.reshaped(test_inputs::join(c.lead, {c.Hq, r.lse.dim(-1), 1}));
  EXPECT_LT(worst(ring_gather(lse_rows, c.L, ro.comm),
                  whole.lse.reshaped(test_inputs::join(c.lead, {c.Hq, c.L, 1}))),
            2e-6);

  AttentionGrads g;
  ring_attention_backward(g, ql, kl, vl, r.out, r.lse, ring_scatter(dout, ro.comm), ro);
  EXPECT_LT(worst(ring_gather(g.dq, c.L, ro.comm), gw.dq), 2e-5) << "rank " << world_rank();
  EXPECT_LT(worst(ring_gather(g.dk, c.L, ro.comm), gw.dk), 2e-5) << "rank " << world_rank();
  EXPECT_LT(worst(ring_gather(g.dv, c.L, ro.comm), gw.dv), 2e-5) << "rank " << world_rank();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Ring,
    ::testing::Values(Case{{}, 2, 2, 64, 16, 16, false}, Case{{}, 2, 2, 64, 16, 16, true},
                      // GQA, a lead dim, Dv != D, a length no rank count divides
                      Case{{2}, 4, 2, 37, 8, 12, true}, Case{{2}, 4, 1, 37, 8, 12, false},
                      // longer than one kernel tile per chunk
                      Case{{}, 2, 1, 301, 32, 32, true}));

TEST(RingPartition, ChunksCoverTheSequenceOnce) {
  const int P = world_size();
  for (int64_t L : {int64_t{2} * P, int64_t{37}, int64_t{1000}}) {
    std::vector<int> seen(L, 0);
    int64_t total = 0;
    for (int r = 0; r < P; ++r) {
      const auto parts = ring_partition(L, r, P);
      ASSERT_EQ(parts.size(), 2u);
      for (auto [b, e] : parts)
        for (int64_t i = b; i < e; ++i) ++seen[i];
      total += ring_local_length(L, r, P);
    }
    EXPECT_EQ(total, L);
    for (int64_t i = 0; i < L; ++i) EXPECT_EQ(seen[i], 1) << "position " << i;
  }
}

TEST(RingAttention, RefusesMismatchedShapes) {
  RingAttentionOptions ro;
  ro.length = 64;
  const Tensor wrong(DType::f32, {1, 5, 8});  // not this rank's share of 64
  AttentionResult r;
  EXPECT_THROW(ring_attention_forward(r, wrong, wrong, wrong, ro), Error);
  ro.length = 1;  // fewer positions than 2 per rank
  EXPECT_THROW(ring_attention_forward(r, wrong, wrong, wrong, ro), Error);
}

}  // namespace
}  // namespace qkv

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Every rank reports (a failure on rank 3 must be seen); any rank's
  // failure fails every rank's exit code.
  const int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
