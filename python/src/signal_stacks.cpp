// signal_stacks.cpp: Ctrl-C must not land on a kernel's stack.
//
// oneDNN's generated GEMM code keeps data below its stack pointer; a signal
// handler that runs on that stack writes its frame over it, and the heap was
// corrupted ("corrupted size vs. prev_size") when Ctrl-C reached a forward
// pass in about half of the tries. Python installs its handlers with
// SA_ONSTACK, so they run on a thread's alternate signal stack when it has
// one: the importing thread gets one (unless it has one already, e.g. from
// faulthandler), and the OpenMP workers block SIGINT, so that the process's
// SIGINT is delivered to a thread whose handler runs off the kernel's stack.
#include "signal_stacks.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>

#include <cstddef>

namespace qkvpy {

void protect_signal_stacks() {
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
    static std::byte stack[256 * 1024];  // the handler runs Python's C trip code only
    stack_t alt{};
    alt.ss_sp = stack;
    alt.ss_size = sizeof stack;
    alt.ss_flags = 0;
    sigaltstack(&alt, nullptr);
  }
  // libgomp keeps its workers for the process's life: blocking SIGINT in
  // each one now holds for every later parallel region of up to this size.
#pragma omp parallel num_threads(omp_get_max_threads())
  {
    if (omp_get_thread_num() != 0) {
      sigset_t block;
      sigemptyset(&block);
      sigaddset(&block, SIGINT);
      pthread_sigmask(SIG_BLOCK, &block, nullptr);
    }
  }
}

}  // namespace qkvpy
