// _qkv._testing: the op's count of copied inputs (a counter private to the
// library, core/ops/attention_operands.h) and the pointers the last
// attention() call gave it; together they show that a view was read in place.
#include "testing.h"

#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

#include "core/ops/attention_operands.h"

namespace nb = nanobind;

namespace qkvpy {

namespace {
std::vector<uintptr_t> g_last_pointers;  // query, key, value of the last attention() call
}  // namespace

void record_inputs(const qkv::TensorView& q, const qkv::TensorView& k, const qkv::TensorView& v) {
  g_last_pointers = {reinterpret_cast<uintptr_t>(q.raw()), reinterpret_cast<uintptr_t>(k.raw()),
                     reinterpret_cast<uintptr_t>(v.raw())};
}

void bind_testing(nb::module_& m) {
  nb::module_ t = m.def_submodule("_testing", "Test hooks (tests/python/test_views.py)");
  t.def("input_copies", &qkv::input_copies,
        "How many inputs the op has copied in this process (strided last dim).");
  t.def(
      "last_pointers", [] { return g_last_pointers; },
      "The data pointers of query, key and value the last attention() call gave the op.");
}

}  // namespace qkvpy
