#include "core/ref/attention_ref.h"

#include <cmath>
#include <vector>

#include "core/ref/softmax_ref.h"
#include "core/runtime/interrupt.h"
#include "core/values.h"

namespace qkv::ref {
namespace {

// Stores x, rounded once, into element i of a float32, float64 or bfloat16
// result.
void put(Tensor& t, int64_t i, double x) {
  switch (t.dtype()) {
    case DType::f32: t.data<float>()[i] = static_cast<float>(x); break;
    case DType::f64: t.data<double>()[i] = x; break;
    case DType::bf16: t.data<bfloat16>()[i] = bf16_from_float(static_cast<float>(x)); break;
    case DType::boolean: break;
  }
}

// score_row's contract (attention_ref.h). Visibility and bias come first, so
// a hidden key costs no dot product.
template <class T>
void row_scores(const AttentionProblem& p, const T* qi, int64_t b, int64_t h, int64_t i,
                double* s, double* dcap) {
  const bool mask = p.mask.present();
  const int64_t bh = b * p.Hq + h;
  const T* Kg = p.k.head<T>(b * p.Hkv + h / p.group);  // GQA: the shared K head
  const int64_t first = p.first_key(i), last = p.last_key(b, i);
  for (int64_t j = 0; j < p.S; ++j) {
    bool visible = first <= j && j <= last;
    double bias = p.alibi(h, i, j);
    if (mask) {
      const int64_t m = p.mask.head_offset[bh] + i * p.mask.stride_n + j * p.mask.stride_s;
      visible = visible && !p.mask.hides(m);
      bias += p.mask.bias(m);
    }
    if (dcap) dcap[j] = 1.0;
    if (!visible) {
      s[j] = -INFINITY;
      continue;
    }
    const T* kj = Kg + j * p.k.row_stride;
    double dot = 0.0;
    for (int64_t d = 0; d < p.D; ++d) dot += as_double(qi[d]) * as_double(kj[d]);
    double x = dot * p.scale;
    if (p.softcap > 0.0) {
      const double t = std::tanh(x / p.softcap);
      x = p.softcap * t;
      if (dcap) dcap[j] = 1.0 - t * t;
    }
    s[j] = x + bias;
  }
}

template <class T>
void forward(AttentionResult& res, const AttentionProblem& p, bool want_weights, bool want_lse) {
  std::vector<double> s(p.S), acc(p.Dv);
  Interrupt interrupt;
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t bh = b * p.Hq + h;
      const int64_t bg = b * p.Hkv + h / p.group;  // GQA: the shared K/V head
      const T* Vb = p.v.head<T>(bg);
      for (int64_t i = 0; i < p.N; ++i) {
        interrupt.check();
        row_scores(p, p.q.row<T>(bh, i), b, h, i, s.data(), nullptr);
        const double lse = softmax_row(s.data(), s.data(), p.S);  // s now holds weights
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < p.S; ++j) {
          if (s[j] == 0.0) continue;
          const T* vj = Vb + j * p.v.row_stride;
          for (int64_t e = 0; e < p.Dv; ++e) acc[e] += s[j] * as_double(vj[e]);
        }
        for (int64_t e = 0; e < p.Dv; ++e) put(res.out, (bh * p.N + i) * p.Dv + e, acc[e]);
        if (want_weights)
          for (int64_t j = 0; j < p.S; ++j) put(res.weights, (bh * p.N + i) * p.S + j, s[j]);
        if (want_lse) put(res.lse, bh * p.N + i, lse);
      }
    }
  }
}

}  // namespace

void score_row(const AttentionProblem& p, const float* qi, int64_t b, int64_t h, int64_t i,
               double* s, double* dcap) {
  row_scores(p, qi, b, h, i, s, dcap);
}
void score_row(const AttentionProblem& p, const double* qi, int64_t b, int64_t h, int64_t i,
               double* s, double* dcap) {
  row_scores(p, qi, b, h, i, s, dcap);
}

void attention_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                       bool want_lse) {
  if (p.dtype == DType::f32)
    forward<float>(res, p, want_weights, want_lse);
  else if (p.dtype == DType::bf16)
    forward<bfloat16>(res, p, want_weights, want_lse);
  else
    forward<double>(res, p, want_weights, want_lse);
}

}  // namespace qkv::ref
