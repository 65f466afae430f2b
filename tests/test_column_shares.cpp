// ColumnShares (src/model/column_shares.h): every column of C goes to
// exactly one chunk, whatever the thread count, the region's real size or
// how the threads race; and the chunk helpers' sizes.
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "linalg/column_shares.h"

namespace qkv::kernels {
namespace {

// Runs a region of `run` threads over shares made for `planned` and counts
// how often each column is handed out; chunks must also be whole and in range.
std::vector<int> hand_out(int64_t N, int64_t chunk, int planned, int run) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(N));
  ColumnShares shares(N, chunk, planned);
  std::atomic<bool> bad{false};
#pragma omp parallel num_threads(run)
  {
    const int t = omp_get_thread_num();
    for (int64_t lo, hi; shares.next(t, lo, hi);) {
      if (lo < 0 || hi > N || lo >= hi || lo % chunk != 0 || (hi - lo != chunk && hi != N)) bad = true;
      for (int64_t j = lo; j < hi && j < N; ++j) seen[static_cast<size_t>(j)]++;
    }
  }
  EXPECT_FALSE(bad.load()) << "a chunk out of range or not whole";
  std::vector<int> out;
  for (auto& s : seen) out.push_back(s.load());
  return out;
}

TEST(ColumnShares, EveryColumnOnceForAnyThreadsAndChunks) {
  for (int64_t N : {1, 5, 6, 7, 100, 2048, 5633})
    for (int64_t chunk : {1, 6, 18, 4096})
      for (int planned : {1, 2, 3, 8})
        for (int run : {1, 2, 3}) {
          const std::vector<int> seen = hand_out(N, chunk, planned, run);
          for (int64_t j = 0; j < N; ++j)
            ASSERT_EQ(seen[static_cast<size_t>(j)], 1)
                << "column " << j << " of N " << N << ", chunk " << chunk << ", shares for " << planned
                << " threads, " << run << " running";
        }
}

// More threads than shares (planned for 2, 6 running; and past the cap of
// shares): those without one only take from others.
TEST(ColumnShares, ThreadsPastTheSharesTakeFromOthers) {
  for (int s : hand_out(10000, 6, 2, 6)) ASSERT_EQ(s, 1);
  for (int s : hand_out(10000, 6, 100, 4)) ASSERT_EQ(s, 1);
}

// Owners and thieves racing for the last chunks of one-column chunks, many
// times over: a take that is not one compare-and-swap hands a column out
// twice or never, sooner or later.
TEST(ColumnShares, RacingThreadsHandOutEachColumnOnce) {
  for (int rep = 0; rep < 100; ++rep)
    for (int s : hand_out(4096, 1, 2, 4)) ASSERT_EQ(s, 1) << "repetition " << rep;
}

TEST(ColumnShares, NoColumnsNoChunks) {
  ColumnShares shares(0, 6, 2);
  int64_t lo = -1, hi = -1;
  EXPECT_FALSE(shares.next(0, lo, hi));
  EXPECT_FALSE(shares.next(1, lo, hi));
}

// A thread's first chunks are its own share's, front to back (its rows
// stream as one piece); the other's are taken from their back.
TEST(ColumnShares, OwnShareFromTheFrontOthersFromTheBack) {
  ColumnShares shares(60, 6, 2);  // 10 chunks: thread 0 owns 0..4, thread 1 owns 5..9
  int64_t lo, hi;
  ASSERT_TRUE(shares.next(0, lo, hi));
  EXPECT_EQ(lo, 0);
  ASSERT_TRUE(shares.next(0, lo, hi));
  EXPECT_EQ(lo, 6);
  ASSERT_TRUE(shares.next(1, lo, hi));
  EXPECT_EQ(lo, 30);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(shares.next(0, lo, hi));
  EXPECT_EQ(lo, 24);  // thread 0's last own chunk
  ASSERT_TRUE(shares.next(0, lo, hi));
  EXPECT_EQ(lo, 54);  // then thread 1's last
  EXPECT_EQ(hi, 60);
}

TEST(ColumnShares, ChunkSizes) {
  // About 128 KiB of rows, whole blocks, at least one block.
  EXPECT_EQ(chunk_columns(2048 * 4, 6), 12);   // 16 rows of 8 KiB: two blocks of 6
  EXPECT_EQ(chunk_columns(1 << 20, 6), 6);     // rows past the target: one block
  EXPECT_EQ(chunk_columns(2048 * 2, 6), 30);   // bf16 rows of 4 KiB: 32 rows, whole blocks
  EXPECT_EQ(share_columns(768, 2, 32), 384);
  EXPECT_EQ(share_columns(100, 3, 32), 64);    // 4 blocks over 3 threads: 2 each
  EXPECT_EQ(share_columns(0, 2, 32), 32);
}

}  // namespace
}  // namespace qkv::kernels
