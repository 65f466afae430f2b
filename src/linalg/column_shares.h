// column_shares.h: C's columns shared among the threads of one parallel
// region, for the GEMMs whose threads each compute whole columns (the
// dot-product kernels of a decoded token or a short text).
//
// A token's products read every weight once and wait on memory, and the
// cores' shares of the bandwidth drift from moment to moment: with a fixed
// half each, one thread waited at the end of most products (4-5% of a
// TinyLlama float32 token's samples were libgomp's wait; 1.5% with the
// chunks, and decode 1.05x as fast, alternated in one process, Zen 5). Here each thread
// starts on the same contiguous share as before, in chunks, so its rows
// still stream as one piece; a thread done with its share takes chunks from
// the end of the share with most left. A column's bits do not depend on
// which thread or call computes it, so neither do C's.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace qkv::kernels {

// Columns a chunk for a product reading `row_bytes` of B for each column
// (B [N, K]: one row of K elements): about 128 KiB of weights, whole
// blocks of `block` columns, at least one block. A chunk's work then dwarfs
// taking it (one uncontended compare-and-swap), and a thread waits at most
// one chunk's read, microseconds, for the other.
inline int64_t chunk_columns(int64_t row_bytes, int64_t block) {
  constexpr int64_t kChunkBytes = 128 << 10;
  const int64_t blocks = kChunkBytes / std::max<int64_t>(1, row_bytes * block);
  return std::max<int64_t>(1, blocks) * block;
}

// Columns a chunk for one chunk a thread: N's whole blocks of `block`
// split evenly (a layout read in short stretches of each row, B [K, N],
// where chunks would cut each thread's stream into shorter ones).
inline int64_t share_columns(int64_t N, int threads, int64_t block) {
  const int64_t blocks = (N + block - 1) / block;
  return std::max<int64_t>(1, (blocks + threads - 1) / threads) * block;
}

class ColumnShares {
 public:
  // Columns [0, N) in chunks of `chunk` (a multiple of the kernel's block)
  // for `threads` shares. Past kMaxShares threads (more than any 2-socket
  // machine's cores) the rest only take from others: right, if contended.
  // Made before the region opens, on the stack; the region may run fewer
  // threads (nested, or capped): the chunks of a share whose thread never
  // comes are taken by the others.
  ColumnShares(int64_t N, int64_t chunk, int threads)
      : N_(N), chunk_(std::max<int64_t>(1, chunk)), count_(std::clamp(threads, 1, kMaxShares)) {
    while ((N + chunk_ - 1) / chunk_ >= int64_t{1} << 31) chunk_ *= 2;  // a count fits half a word
    const int64_t chunks = (N + chunk_ - 1) / chunk_;
    for (int t = 0; t < count_; ++t)
      shares_[t].range.store(pack(chunks * t / count_, chunks * (t + 1) / count_), std::memory_order_relaxed);
  }

  // The next columns [lo, hi) for thread t: from the front of its own
  // share, then from the back of the fullest other one. False when none
  // are left.
  bool next(int t, int64_t& lo, int64_t& hi) {
    int64_t c = -1;
    if (t < count_ && take(shares_[t], true, c)) return columns(c, lo, hi);
    for (;;) {
      int victim = -1;
      uint64_t most = 0;
      for (int v = 0; v < count_; ++v) {
        const uint64_t r = shares_[v].range.load(std::memory_order_relaxed);
        const uint64_t left = end(r) > begin(r) ? end(r) - begin(r) : 0;
        if (left > most) most = left, victim = v;
      }
      if (victim < 0) return false;
      if (take(shares_[victim], false, c)) return columns(c, lo, hi);
    }
  }

 private:
  // A share's chunks [begin, end) in one word, so that its owner (taking
  // from the front) and the others (from the back) never take the same one.
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};
  };
  static uint64_t pack(int64_t b, int64_t e) { return static_cast<uint64_t>(e) << 32 | static_cast<uint64_t>(b); }
  static uint64_t begin(uint64_t r) { return r & 0xffffffffu; }
  static uint64_t end(uint64_t r) { return r >> 32; }

  static bool take(Share& s, bool front, int64_t& c) {
    uint64_t r = s.range.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t b = begin(r), e = end(r);
      if (b >= e) return false;
      const uint64_t taken = front ? pack(static_cast<int64_t>(b + 1), static_cast<int64_t>(e))
                                   : pack(static_cast<int64_t>(b), static_cast<int64_t>(e - 1));
      if (s.range.compare_exchange_weak(r, taken, std::memory_order_relaxed)) {
        c = static_cast<int64_t>(front ? b : e - 1);
        return true;
      }
    }
  }

  bool columns(int64_t c, int64_t& lo, int64_t& hi) const {
    lo = c * chunk_;
    hi = std::min(N_, lo + chunk_);
    return true;
  }

  static constexpr int kMaxShares = 64;
  int64_t N_, chunk_;
  int count_;
  Share shares_[kMaxShares];
};

}  // namespace qkv::kernels
