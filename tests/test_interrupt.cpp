// test_interrupt.cpp: InterruptScope (qkv/runtime.h). Long attention calls
// (forward and backward, fast and reference kernels) ask the calling
// thread's poll between chunks and stop with qkv::Interrupted once it says
// so; a poll that says no changes nothing (bitwise); a call shorter than the
// poll interval never polls; scopes nest.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/runtime.h"
#include "qkv/view.h"
#include "random_inputs.h"

namespace qkv {
namespace {

using test_inputs::normal;

struct Problem {
  Tensor q, k, v;
};

// Big enough that each call takes well over the 100 ms poll interval.
Problem long_problem(DType dt, int64_t n) {
  std::mt19937_64 gen(7);
  return {normal({1, 2, n, 64}, gen, dt), normal({1, 2, n, 64}, gen, dt),
          normal({1, 2, n, 64}, gen, dt)};
}

AttentionOptions with(Kernel k) {
  AttentionOptions o;
  o.kernel = k;
  o.return_lse = true;
  return o;
}

struct Case {
  DType dt;
  Kernel kernel;
  int64_t n;
};

class Interrupts : public ::testing::TestWithParam<Case> {};

TEST_P(Interrupts, ForwardStopsWhenThePollSaysSo) {
  const Case c = GetParam();
  const Problem p = long_problem(c.dt, c.n);
  std::atomic<int> polls{0};
  const std::thread::id me = std::this_thread::get_id();
  bool other_thread = false;
  const InterruptScope scope([&] {
    other_thread |= std::this_thread::get_id() != me;
    return ++polls >= 2;
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(attention(p.q, p.k, p.v, with(c.kernel)), Interrupted);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(polls.load(), 2);  // never asked again once it said stop
  EXPECT_FALSE(other_thread);
  EXPECT_LT(s, 2.0);
}

TEST_P(Interrupts, BackwardStopsWhenThePollSaysSo) {
  const Case c = GetParam();
  const Problem p = long_problem(c.dt, c.n);
  // out, lse and dout of the right shapes: their values do not matter here.
  const Tensor out = p.q, dout = p.q;
  const Tensor lse = attention(p.q, TensorView(p.k).slice(-2, 0, 1), TensorView(p.v).slice(-2, 0, 1),
                               with(c.kernel)).lse;
  const InterruptScope scope([] { return true; });
  AttentionGrads g;
  EXPECT_THROW(attention_backward_into(g, p.q, p.k, p.v, out, lse, dout, with(c.kernel)),
               Interrupted);
}

INSTANTIATE_TEST_SUITE_P(Kernels, Interrupts,
                         ::testing::Values(Case{DType::f32, Kernel::fast, 16384},
                                           Case{DType::f64, Kernel::reference, 4096}));

TEST(Interrupt, APollThatSaysNoChangesNothing) {
  const Problem p = long_problem(DType::f32, 4096);
  const AttentionResult plain = attention(p.q, p.k, p.v, with(Kernel::fast));
  int polls = 0;
  AttentionResult polled;
  {
    const InterruptScope scope([&] { return ++polls, false; });
    for (int i = 0; i < 5; ++i) polled = attention(p.q, p.k, p.v, with(Kernel::fast));
  }
  EXPECT_EQ(std::memcmp(plain.out.raw(), polled.out.raw(), plain.out.nbytes()), 0);
  EXPECT_EQ(std::memcmp(plain.lse.raw(), polled.lse.raw(), plain.lse.nbytes()), 0);
}

TEST(Interrupt, AShortCallNeverPolls) {
  const Problem p = long_problem(DType::f32, 64);
  int polls = 0;
  const InterruptScope scope([&] { return ++polls, true; });
  for (int i = 0; i < 100; ++i) attention(p.q, p.k, p.v);
  EXPECT_EQ(polls, 0);
}

TEST(Interrupt, APollThatThrowsStops) {
  const Problem p = long_problem(DType::f32, 16384);
  const InterruptScope scope([]() -> bool { throw std::runtime_error("poll failed"); });
  EXPECT_THROW(attention(p.q, p.k, p.v, with(Kernel::fast)), Interrupted);
}

TEST(Interrupt, ScopesNestAndRestore) {
  const Problem p = long_problem(DType::f32, 16384);
  int outer = 0, inner = 0;
  const InterruptScope a([&] { return ++outer, true; });
  {
    const InterruptScope b([&] { return ++inner, true; });
    EXPECT_THROW(attention(p.q, p.k, p.v, with(Kernel::fast)), Interrupted);
  }
  EXPECT_EQ(outer, 0);
  EXPECT_EQ(inner, 1);
  EXPECT_THROW(attention(p.q, p.k, p.v, with(Kernel::fast)), Interrupted);
  EXPECT_EQ(outer, 1);
}

}  // namespace
}  // namespace qkv
