// positional.cpp: sinusoidal and learned position tables, token lookup, RoPE:
// argument checks around the shared layers of qkv/nn.h (the lookups are
// nn::embedding_forward gathers, RoPE is nn::rope_forward, as in the GPT).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/positional.h"
#include "qkv/rng.h"

namespace qkv {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

// GPT-2 draws both embedding tables from N(0, 0.02^2).
Tensor normal_table(int64_t rows, int64_t C, NumpyGenerator& rng, const char* what) {
  if (rows < 1 || C < 1)
    throw Error(std::string(what) + ": table dims must be at least 1, found [" + num(rows) +
                ", " + num(C) + "]");
  Tensor t(DType::f64, {rows, C});
  rng.normal(t.data<double>(), static_cast<size_t>(t.numel()), 0.0, 0.02);
  return t;
}

// A lookup table must be a 2-D float [rows, C] before rows can be copied out of it.
void check_table(const Tensor& table, const char* what, const char* layout) {
  if (table.rank() != 2 || table.dtype() == DType::boolean)
    throw Error(std::string(what) + ": expected a float table " + layout + ", found " +
                dtype_name(table.dtype()) + " " + shape_str(table.shape()));
}

// out [rows, C] = table[rows[r], :] -> shape + [C], the embedding layer's
// gather (no position table). A pure copy: no rounding. Ids already checked.
Tensor gather_rows(const Tensor& table, const std::vector<int64_t>& rows, Shape shape) {
  const int64_t C = table.dim(1), n = static_cast<int64_t>(rows.size());
  // The layer takes int32 ids; a table with more rows than that cannot be indexed.
  if (table.dim(0) > std::numeric_limits<int32_t>::max())
    throw Error("embedding: tables of more than 2^31 - 1 rows are not supported, found " +
                num(table.dim(0)));
  const std::vector<int32_t> ids(rows.begin(), rows.end());
  shape.push_back(C);
  Tensor out(table.dtype(), std::move(shape));
  if (table.dtype() == DType::f64)
    nn::embedding_forward<double>(out.data<double>(), ids.data(), table.data<double>(), nullptr, 1,
                                  n, C);
  else
    nn::embedding_forward<float>(out.data<float>(), ids.data(), table.data<float>(), nullptr, 1, n,
                                 C);
  return out;
}

}  // namespace

Tensor sinusoidal_encoding(int64_t T, int64_t C) {
  if (T < 0 || C < 1)
    throw Error("sinusoidal_encoding: expected T >= 0 and C >= 1, found T = " + num(T) +
                ", C = " + num(C));
  Tensor pe(DType::f64, {T, C});
  double* p = pe.data<double>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < C; ++j) {
      const int64_t two_i = j - j % 2;  // columns 2i and 2i + 1 share a frequency
      const double angle = static_cast<double>(t) /
                           std::pow(10000.0, static_cast<double>(two_i) / static_cast<double>(C));
      p[t * C + j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  return pe;
}

LearnedPositionEmbedding LearnedPositionEmbedding::init(int64_t T_max, int64_t C,
                                                        NumpyGenerator& rng) {
  return {normal_table(T_max, C, rng, "position embedding")};
}

Tensor LearnedPositionEmbedding::forward(int64_t T, int64_t offset) const {
  check_table(table, "position embedding", "[T_max, C]");
  const int64_t T_max = table.dim(0);
  if (T < 0 || offset < 0)
    throw Error("position embedding: expected T >= 0 and offset >= 0, found T = " + num(T) +
                ", offset = " + num(offset));
  if (offset > T_max - T)
    throw Error("position embedding: positions up to offset + T = " + num(offset) + " + " +
                num(T) + " = " + num(offset + T) + " exceed T_max = " + num(T_max));
  std::vector<int64_t> rows(T);
  for (int64_t t = 0; t < T; ++t) rows[t] = offset + t;
  return gather_rows(table, rows, {T});
}

TokenEmbedding TokenEmbedding::init(int64_t vocab, int64_t C, NumpyGenerator& rng) {
  return {normal_table(vocab, C, rng, "token embedding")};
}

Tensor TokenEmbedding::forward(const std::vector<int64_t>& ids) const {
  return forward(ids, {static_cast<int64_t>(ids.size())});
}

Tensor TokenEmbedding::forward(const std::vector<int64_t>& ids, const Shape& shape) const {
  check_table(table, "token embedding", "[vocab, C]");
  if (shape_numel(shape) != static_cast<int64_t>(ids.size()))
    throw Error("token embedding: " + num(static_cast<int64_t>(ids.size())) +
                " ids for shape " + shape_str(shape));
  const int64_t vocab = table.dim(0);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw Error("token embedding: id " + num(ids[i]) + " at " +
                  index_str(shape, static_cast<int64_t>(i)) + " is outside [0, vocab = " +
                  num(vocab) + ")");
  return gather_rows(table, ids, shape);
}

Tensor apply_rope(const Tensor& x, int64_t pos0, double base) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw Error(std::string("apply_rope: x: expected float32 or float64, found ") +
                dtype_name(x.dtype()));
  if (x.rank() < 2)
    throw Error("apply_rope: expected x [..., T, D] with at least 2 dims, found " +
                shape_str(x.shape()));
  const int64_t T = x.dim(-2), D = x.dim(-1);
  if (D % 2 != 0)
    throw Error("apply_rope: head dim D must be even to form (i, i + D/2) pairs, found D = " +
                num(D) + " in shape " + shape_str(x.shape()));
  if (pos0 < 0) throw Error("apply_rope: expected pos0 >= 0, found " + num(pos0));
  if (!(base > 0.0) || !std::isfinite(base))
    throw Error("apply_rope: expected a finite base > 0, found " + std::to_string(base));
  if (x.numel() == 0) return Tensor(x.dtype(), x.shape());
  // A table for just the positions pos0 .. pos0 + T - 1 of this call.
  const nn::RopeTable table(T, D, base, pos0);
  const int64_t R = shape_numel(Shape(x.shape().begin(), x.shape().end() - 2));
  Tensor out(x.dtype(), x.shape());
  if (x.dtype() == DType::f32)
    nn::rope_forward(out.data<float>(), x.data<float>(), table, R, T, D, pos0);
  else
    nn::rope_forward(out.data<double>(), x.data<double>(), table, R, T, D, pos0);
  return out;
}

}  // namespace qkv
