// interrupt.h: how long loops honour an InterruptScope (qkv/runtime.h).
//
// An Interrupt is made on the calling thread before a loop (a parallel one
// or not): it takes that thread's poll, if any. Every thread asks stop()
// before each chunk of work and skips the chunk once it is true; only the
// calling thread polls, at most every kPollEvery. After the loop (outside
// any parallel region, where nothing may throw) throw_if_stopped() throws
// qkv::Interrupted. Without a scope stop() is a load and a branch.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "qkv/export.h"

namespace qkv {

// Exported for the model layer's loops (its own shared library), not
// installed: no header of include/qkv names it.
class QKV_API Interrupt {
 public:
  Interrupt();
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  bool stop() {
    if (!poll_) return false;
    if (std::this_thread::get_id() == caller_) poll_if_due();
    return stopped_.load(std::memory_order_relaxed);
  }
  void throw_if_stopped() const;
  // For a loop outside any parallel region: throws at once.
  void check() {
    if (stop()) throw_if_stopped();
  }

 private:
  // A poll takes the GIL in Python: every 100 ms keeps its cost far below
  // 1% of the work and Ctrl-C well within a second.
  static constexpr std::chrono::milliseconds kPollEvery{100};
  void poll_if_due();

  const std::function<bool()>* poll_;
  std::thread::id caller_;
  std::chrono::steady_clock::time_point next_;  // the calling thread's alone
  std::atomic<bool> stopped_{false};
};

}  // namespace qkv
