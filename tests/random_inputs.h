// random_inputs.h: random attention inputs shared by the fast forward and
// backward tests (test_attention_fast.cpp, backward_cases.h), so both draw
// their tensors and masks the same way.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <random>

#include "qkv/tensor.h"

namespace qkv::test_inputs {

// Standard normal values of `shape`, drawn in double, stored as `dt`.
inline Tensor normal(Shape shape, std::mt19937_64& gen, DType dt = DType::f32) {
  std::normal_distribution<double> nd;
  Tensor t(DType::f64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = nd(gen);
  return t.to(dt);
}

inline Shape join(const Shape& lead, std::initializer_list<int64_t> tail) {
  Shape s = lead;
  s.insert(s.end(), tail);
  return s;
}

// A mask for [lead..., Hq, N, S] of `kind`: 0 none, 1 bool, 2 float32,
// 3 float64, 4 bool broadcast, 5 float32 broadcast (leading dims dropped and
// some set to 1). Bool masks are sometimes sparse, leaving rows with no
// visible key; float masks hold -inf in ~15% of places.
inline std::optional<Tensor> random_mask(int kind, const Shape& lead, int64_t Hq, int64_t N,
                                         int64_t S, std::mt19937_64& gen) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(gen); };
  if (kind == 0) return std::nullopt;
  Shape shape = join(lead, {Hq, N, S});
  if (kind >= 4) {
    const int64_t drop = uniform(0, static_cast<int64_t>(shape.size()) - 1);
    shape.erase(shape.begin(), shape.begin() + drop);
    for (int64_t& d : shape)
      if (chance(0.5)) d = 1;
  }
  if (kind == 1 || kind == 4) {
    const double density = std::array{0.8, 0.3, 0.05}[uniform(0, 2)];
    Tensor m(DType::boolean, shape);
    for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = chance(density);
    return m;
  }
  Tensor m = normal(shape, gen, DType::f64);
  for (int64_t i = 0; i < m.numel(); ++i)
    if (chance(0.15)) m.data<double>()[i] = -INFINITY;
  return m.to(kind == 3 ? DType::f64 : DType::f32);
}

}  // namespace qkv::test_inputs
