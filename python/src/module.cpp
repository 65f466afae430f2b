// qkv._qkv: the compiled half of `import qkv`. The Python package (qkv/*.py)
// shapes the arguments and the results; this module converts arrays without
// copying them, releases the GIL around the library's calls and turns
// qkv::Error into ValueError with the library's message.
#include <nanobind/nanobind.h>

#include "qkv/error.h"
#include "signal_stacks.h"
#include "testing.h"

namespace nb = nanobind;

namespace qkvpy {
void bind_attention(nb::module_& m);
void bind_model(nb::module_& m);
void bind_lesson(nb::module_& m);
}  // namespace qkvpy

NB_MODULE(_qkv, m) {
  m.doc() = "qkv's C++ library, bound with nanobind (use the qkv package, not this module)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const qkv::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  qkvpy::bind_attention(m);
  qkvpy::bind_model(m);
  qkvpy::bind_lesson(m);
  qkvpy::bind_testing(m);
  qkvpy::protect_signal_stacks();
}
