#include "core/runtime/interrupt.h"

#include "qkv/error.h"
#include "qkv/runtime.h"

namespace qkv {
namespace {

// The innermost InterruptScope's poll of this thread, or null.
thread_local const std::function<bool()>* t_poll = nullptr;

}  // namespace

InterruptScope::InterruptScope(std::function<bool()> poll) : poll_(std::move(poll)), saved_(t_poll) {
  t_poll = &poll_;
}

InterruptScope::~InterruptScope() { t_poll = saved_; }

Interrupt::Interrupt()
    : poll_(t_poll), caller_(std::this_thread::get_id()),
      next_(std::chrono::steady_clock::now() + kPollEvery) {}

void Interrupt::poll_if_due() {
  // Once it said stop, the poll is not asked again (a second Ctrl-C check
  // would find nothing new).
  if (stopped_.load(std::memory_order_relaxed)) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) return;
  next_ = now + kPollEvery;
  bool stop = true;
  try {
    stop = (*poll_)();
  } catch (...) {
    // Inside a parallel region nothing may escape; a failed poll stops.
  }
  if (stop) stopped_.store(true, std::memory_order_relaxed);
}

void Interrupt::throw_if_stopped() const {
  if (stopped_.load(std::memory_order_relaxed)) throw Interrupted();
}

}  // namespace qkv
