// rope.cpp: rotary position embedding, forward and backward, from one table
// of cos/sin computed once (qkv/nn.h). Used by the GPT (q and k of every
// block, and one row per decode step) and by the lessons' apply_rope.
#include <cmath>
#include <string>

#include "model/layers/nn_common.h"
#include "qkv/error.h"
#include "qkv/nn.h"

namespace qkv::nn {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

// Rows (r, t) of x [R, T, D] turned by +angle (sign = 1) or -angle (sign = -1)
// at position pos0 + t. Every value is computed in double from the table and
// rounded once to T; the pair is read before it is written, so out may be inp.
template <class T>
void rotate(T* out, const T* inp, const RopeTable& table, int64_t R, int64_t Tn, int64_t D,
            int64_t pos0, double sign, const char* what) {
  if (D != table.head_dim())
    throw Error(std::string(what) + ": head dim D = " + num(D) + " but the table was built for " +
                num(table.head_dim()));
  const int64_t first = table.first(), last = first + table.positions() - 1;
  if (pos0 < first || pos0 + Tn - 1 > last)
    throw Error(std::string(what) + ": positions " + num(pos0) + " .. " + num(pos0 + Tn - 1) +
                " outside the table's " + num(first) + " .. " + num(last));
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static) if (R * Tn * D >= detail::kParallelMin)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < Tn; ++t) {
      const double* cs = table.row(pos0 + t);
      const T* x = inp + (r * Tn + t) * D;
      T* y = out + (r * Tn + t) * D;
      for (int64_t i = 0; i < half; ++i) {
        const double cos = cs[2 * i], sin = sign * cs[2 * i + 1];
        const double a = x[i], b = x[i + half];
        y[i] = static_cast<T>(a * cos - b * sin);
        y[i + half] = static_cast<T>(b * cos + a * sin);
      }
    }
}

}  // namespace

RopeTable::RopeTable(int64_t positions, int64_t D, double base, int64_t first)
    : first_(first), positions_(positions), D_(D), base_(base) {
  if (positions < 0) throw Error("rope: expected positions >= 0, found " + num(positions));
  if (first < 0) throw Error("rope: expected a first position >= 0, found " + num(first));
  if (D < 2 || D % 2 != 0)
    throw Error("rope: head dim D must be even to form (i, i + D/2) pairs, found D = " + num(D));
  if (!(base > 0.0) || !std::isfinite(base))
    throw Error("rope: expected a finite base > 0, found " + std::to_string(base));
  std::vector<double> theta(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)  // theta_i = 1 / base^(2i/D), the form of Hugging Face's inv_freq
    theta[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(D));
  fill(theta);
}

RopeTable::RopeTable(int64_t positions, const std::vector<double>& theta, int64_t first)
    : first_(first), positions_(positions), D_(2 * static_cast<int64_t>(theta.size())), base_(0.0) {
  if (positions < 0) throw Error("rope: expected positions >= 0, found " + num(positions));
  if (first < 0) throw Error("rope: expected a first position >= 0, found " + num(first));
  if (theta.empty()) throw Error("rope: expected at least one frequency");
  for (const double t : theta)
    if (!std::isfinite(t)) throw Error("rope: frequencies must be finite, found " + std::to_string(t));
  fill(theta);
}

void RopeTable::fill(const std::vector<double>& theta) {
  const int64_t half = D_ / 2;
  cs_.resize(static_cast<size_t>(positions_ * D_));
  for (int64_t i = 0; i < half; ++i)
    for (int64_t p = 0; p < positions_; ++p) {
      const double angle = static_cast<double>(first_ + p) * theta[i];
      cs_[p * D_ + 2 * i] = std::cos(angle);
      cs_[p * D_ + 2 * i + 1] = std::sin(angle);
    }
}

// out [R, T, D] = RoPE(inp) at positions pos0 .. pos0 + T - 1
template <class T>
void rope_forward(T* out, const T* inp, const RopeTable& table, int64_t R, int64_t Tn, int64_t D,
                  int64_t pos0) {
  rotate(out, inp, table, R, Tn, D, pos0, 1.0, "rope_forward");
}

// dinp [R, T, D] = RoPE⁻¹(dout): the rotation by -angle
template <class T>
void rope_backward(T* dinp, const T* dout, const RopeTable& table, int64_t R, int64_t Tn,
                   int64_t D, int64_t pos0) {
  rotate(dinp, dout, table, R, Tn, D, pos0, -1.0, "rope_backward");
}

template void rope_forward(float*, const float*, const RopeTable&, int64_t, int64_t, int64_t,
                           int64_t);
template void rope_forward(double*, const double*, const RopeTable&, int64_t, int64_t, int64_t,
                           int64_t);
template void rope_backward(float*, const float*, const RopeTable&, int64_t, int64_t, int64_t,
                            int64_t);
template void rope_backward(double*, const double*, const RopeTable&, int64_t, int64_t, int64_t,
                            int64_t);

}  // namespace qkv::nn
