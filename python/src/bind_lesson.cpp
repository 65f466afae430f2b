// _qkv.NumpyGenerator / _qkv.NumpyRandomState: the lessons' random streams
// (qkv/rng.h), for qkv.lesson. Each fills a new float64 array in C order.
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <span>
#include <vector>

#include "arrays.h"
#include "qkv/rng.h"

namespace qkvpy {

namespace {

template <class Fill>
nb::object filled(int64_t n, Fill fill) {
  if (n < 0) throw nb::value_error("size must be >= 0");
  qkv::Tensor t(qkv::DType::f64, {n});
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = fill();
  return wrap(std::move(t), Framework::numpy);
}

}  // namespace

void bind_lesson(nb::module_& m) {
  nb::class_<qkv::NumpyGenerator>(m, "NumpyGenerator")
      // The seed's 32-bit words (any size, as NumPy's SeedSequence takes it).
      .def(
          "__init__",
          [](qkv::NumpyGenerator* self, const std::vector<uint32_t>& words) {
            new (self) qkv::NumpyGenerator(std::span<const uint32_t>(words));
          },
          nb::arg("seed_words"))
      .def("next_uint64", &qkv::NumpyGenerator::next_uint64)
      .def("random", [](qkv::NumpyGenerator& g, int64_t n) { return filled(n, [&] { return g.random(); }); })
      .def("normal", [](qkv::NumpyGenerator& g, double loc, double scale, int64_t n) {
        return filled(n, [&] { return g.normal(loc, scale); });
      });
  nb::class_<qkv::NumpyRandomState>(m, "NumpyRandomState")
      .def(nb::init<uint32_t>(), nb::arg("seed"))
      .def("next_uint32", &qkv::NumpyRandomState::next_uint32)
      .def("random_sample", [](qkv::NumpyRandomState& g, int64_t n) {
        return filled(n, [&] { return g.random_sample(); });
      })
      .def("randn", [](qkv::NumpyRandomState& g, int64_t n) { return filled(n, [&] { return g.randn(); }); });
}

}  // namespace qkvpy
