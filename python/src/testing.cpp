// _qkv._testing: the op's count of copied inputs (a counter private to the
// library, core/ops/attention_operands.h) and the pointers the last
// attention() call gave it; together they show that a view was read in place.
// And a loaded model's network run again in double (hidden_states_f64).
#include "testing.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "arrays.h"
#include "core/ops/attention_operands.h"
#include "qkv/error.h"
#include "qkv/model.h"
#include "qkv/weight.h"

namespace nb = nanobind;

namespace qkvpy {

namespace {
std::vector<uintptr_t> g_last_pointers;  // query, key, value of the last attention() call

// The last hidden states of one sequence by a BasicGPT<double> of the
// model's config holding its float32 weights widened (params() lay them out
// alike for both types): [T, C] float64. A float64 reference computation
// gives the same numbers to ~1e-15, so a difference beyond that is in the
// forward's formulas, not in float32 rounding
// (tests/python/test_bert_minilm.py).
qkv::Tensor hidden_states_f64(qkv::Model& model, const std::vector<int32_t>& ids) {
  qkv::BasicGPT<double> net(model.config());
  const std::span<const float> w = std::as_const(model.gpt()).weights();
  if (w.size() != net.weights().size())
    throw qkv::Error("hidden_states_f64: the model holds " + std::to_string(w.size()) +
                     " weights, its config makes " + std::to_string(net.weights().size()));
  std::copy(w.begin(), w.end(), net.weights().begin());
  const int64_t T = static_cast<int64_t>(ids.size());
  const std::span<const double> h = net.hidden_states(ids.data(), std::span<const int64_t>(&T, 1));
  qkv::Tensor out(qkv::DType::f64, {T, model.config().embd});
  std::copy(h.begin(), h.end(), out.data<double>());
  return out;
}
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
  t.def(
      "hidden_states_f64",
      [](qkv::Model& model, const std::vector<int32_t>& ids) {
        qkv::Tensor h;
        {
          nb::gil_scoped_release unlocked;
          h = hidden_states_f64(model, ids);
        }
        return wrap(std::move(h), Framework::numpy);
      },
      nb::arg("model"), nb::arg("ids"),
      "The model (a _qkv.Model) run in float64 on one id sequence: [T, C] hidden states.");
  t.def(
      "matrices_dtype",
      [](qkv::Model& model) {
        return std::string(model.gpt().matrices_dtype() == qkv::DType::bf16 ? "bf16" : "float32");
      },
      nb::arg("model"), "What the network holds its matrices in now: bf16 only, or float32.");
  t.def(
      "mapped_weight_bytes", [](qkv::Model& model) { return model.gpt().mapped_weight_bytes(); },
      nb::arg("model"), "Bytes of weights read where the mapped checkpoint files hold them.");
  t.def(
      "packed_weight_bytes", [](qkv::Model& model) { return model.gpt().packed_weight_bytes(); },
      nb::arg("model"), "Bytes of float32 matrices packed at load for their products.");
  t.def(
      "weight_matmul_tiles",
      [](const std::string& name) {
        for (const qkv::WeightTypeInfo& info : qkv::weight_types())
          if (name == info.name) return qkv::weight_matmul_tiles(info.type);
        throw nb::value_error(("unknown weight type '" + name + "'").c_str());
      },
      nb::arg("name"), "Whether a long prompt's products with weights of type `name` (\"Q8_0\") run weight_matmul's tiles.");
}

}  // namespace qkvpy
