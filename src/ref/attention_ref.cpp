#include "ref/attention_ref.h"

#include <cmath>
#include <vector>

#include "ref/softmax_ref.h"

namespace qkv::ref {
namespace {

// Scaled (and soft-capped) score of query i against key j, before any bias.
template <class T>
double score(const T* qi, const T* kj, int64_t D, double scale, double softcap) {
  double dot = 0.0;
  for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * static_cast<double>(kj[d]);
  const double s = dot * scale;
  return softcap > 0.0 ? softcap * std::tanh(s / softcap) : s;
}

template <class T>
void forward(AttentionResult& res, const Tensor& q, const Tensor& k, const Tensor& v,
             const AttentionProblem& p, bool want_weights, bool want_lse) {
  const T* Q = q.data<T>();
  const T* K = k.data<T>();
  const T* V = v.data<T>();
  T* O = res.out.data<T>();
  T* W = want_weights ? res.weights.data<T>() : nullptr;
  T* L = want_lse ? res.lse.data<T>() : nullptr;
  const Tensor* mask = p.mask.tensor;
  const bool bool_mask = mask && mask->dtype() == DType::boolean;

  std::vector<double> s(p.S), acc(p.Dv);
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t bh = b * p.Hq + h;
      const int64_t bg = b * p.Hkv + h / p.group;  // GQA: the shared K/V head
      const T* Kb = K + bg * p.S * p.D;
      const T* Vb = V + bg * p.S * p.Dv;
      for (int64_t i = 0; i < p.N; ++i) {
        const T* qi = Q + (bh * p.N + i) * p.D;
        const int64_t first = p.first_key(i), last = p.last_key(b, i);
        for (int64_t j = 0; j < p.S; ++j) {
          bool visible = first <= j && j <= last;
          double bias = p.alibi(h, i, j);
          if (mask) {
            const int64_t m = p.mask.head_offset[bh] + i * p.mask.stride_n + j * p.mask.stride_s;
            if (bool_mask)
              visible = visible && mask->data<bool>()[m];
            else
              bias += mask->get(m);
          }
          s[j] = visible ? score(qi, Kb + j * p.D, p.D, p.scale, p.softcap) + bias : -INFINITY;
        }
        const double lse = softmax_row(s.data(), s.data(), p.S);  // s now holds weights
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < p.S; ++j) {
          if (s[j] == 0.0) continue;
          const T* vj = Vb + j * p.Dv;
          for (int64_t e = 0; e < p.Dv; ++e) acc[e] += s[j] * static_cast<double>(vj[e]);
        }
        T* oi = O + (bh * p.N + i) * p.Dv;
        for (int64_t e = 0; e < p.Dv; ++e) oi[e] = static_cast<T>(acc[e]);
        if (W)
          for (int64_t j = 0; j < p.S; ++j) W[(bh * p.N + i) * p.S + j] = static_cast<T>(s[j]);
        if (L) L[bh * p.N + i] = static_cast<T>(lse);
      }
    }
  }
}

}  // namespace

void attention_forward(AttentionResult& res, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionProblem& p, bool want_weights, bool want_lse) {
  if (q.dtype() == DType::f32)
    forward<float>(res, q, k, v, p, want_weights, want_lse);
  else
    forward<double>(res, q, k, v, p, want_weights, want_lse);
}

}  // namespace qkv::ref
