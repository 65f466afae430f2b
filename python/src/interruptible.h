// interruptible.h: the library's long calls, run with the GIL released and
// still stopped by Ctrl-C.
//
// Python runs its SIGINT handler (KeyboardInterrupt) only when the main
// thread executes Python, which it does not while it waits in a C++ kernel.
// So the kernel is run under a qkv::InterruptScope whose poll, called from
// this thread between chunks of work (every 100 ms at most), takes the GIL
// and runs the pending handlers (PyErr_CheckSignals). When one raised, the
// library stops and throws qkv::Interrupted, and the handler's exception is
// raised here instead. On any other thread than the main one the poll finds
// nothing to do (Python delivers signals to the main thread).
#pragma once

#include <nanobind/nanobind.h>

#include <utility>

#include "qkv/error.h"
#include "qkv/runtime.h"

namespace qkvpy {

namespace nb = nanobind;

// work() with the GIL released; called with the GIL held.
template <class Work>
auto interruptible(Work&& work) {
  bool raised = false;
  const qkv::InterruptScope scope([&raised] {
    nb::gil_scoped_acquire locked;
    raised = raised || PyErr_CheckSignals() != 0;
    return raised;
  });
  try {
    nb::gil_scoped_release unlocked;
    return std::forward<Work>(work)();
  } catch (const qkv::Interrupted&) {
    if (raised) throw nb::python_error();  // the handler's exception, pending since the poll
    throw;
  }
}

}  // namespace qkvpy
