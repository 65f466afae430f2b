#include "core/ref/attention_backward_ref.h"

#include <cmath>
#include <vector>

#include "core/ref/attention_ref.h"
#include "core/runtime/interrupt.h"

namespace qkv::ref {
namespace {

// q [B, Hq, N, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] (through p, any row
// strides), lse [B, Hq, N], dout [B, Hq, N, Dv] (C-ordered) -> dq, dk, dv
// of the same shapes as q, k, v, C-ordered.
template <class T>
void backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in) {
  const T* L = static_cast<const T*>(in.lse);
  const T* dO = static_cast<const T*>(in.dout);
  // dk and dv gather over every query row of a GQA group: keep them in
  // double until the end. dq_i is finished within its row.
  std::vector<double> dk(static_cast<size_t>(p.B * p.Hkv * p.S * p.D));
  std::vector<double> dv(static_cast<size_t>(p.B * p.Hkv * p.S * p.Dv));
  std::vector<double> s(p.S), dcap(p.S), dp(p.S), dq(p.D);
  Interrupt interrupt;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h) {
      const int64_t bg = b * p.Hkv + h / p.group;  // GQA: the shared K/V head
      const T* Kg = p.k.head<T>(bg);
      const T* Vg = p.v.head<T>(bg);
      const int64_t ldk = p.k.row_stride, ldv = p.v.row_stride;
      double* dKg = dk.data() + bg * p.S * p.D;
      double* dVg = dv.data() + bg * p.S * p.Dv;
      for (int64_t i = 0; i < p.N; ++i) {
        interrupt.check();
        const int64_t row = (b * p.Hq + h) * p.N + i;
        const T* qi = p.q.row<T>(b * p.Hq + h, i);
        const T* doi = dO + row * p.Dv;
        T* dqi = g.dq.data<T>() + row * p.D;
        const double lse_i = static_cast<double>(L[row]);
        std::fill(dq.begin(), dq.end(), 0.0);
        if (lse_i == -INFINITY) {  // no visible key: no gradient flows
          for (int64_t d = 0; d < p.D; ++d) dqi[d] = T(0);
          continue;
        }
        score_row(p, qi, b, h, i, s.data(), dcap.data());
        // s becomes p_ij; dp_ij = dout_i · v_j; D_i = Σ_j p_ij dp_ij.
        double Di = 0.0;
        for (int64_t j = 0; j < p.S; ++j) {
          s[j] = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - lse_i);
          if (s[j] == 0.0) continue;
          double dot = 0.0;
          for (int64_t e = 0; e < p.Dv; ++e)
            dot += static_cast<double>(doi[e]) * static_cast<double>(Vg[j * ldv + e]);
          dp[j] = dot;
          Di += s[j] * dot;
        }
        for (int64_t j = 0; j < p.S; ++j) {
          if (s[j] == 0.0) continue;
          const double ds = s[j] * (dp[j] - Di) * dcap[j] * p.scale;
          for (int64_t d = 0; d < p.D; ++d) {
            dq[d] += ds * static_cast<double>(Kg[j * ldk + d]);
            dKg[j * p.D + d] += ds * static_cast<double>(qi[d]);
          }
          for (int64_t e = 0; e < p.Dv; ++e) dVg[j * p.Dv + e] += s[j] * static_cast<double>(doi[e]);
        }
        for (int64_t d = 0; d < p.D; ++d) dqi[d] = static_cast<T>(dq[d]);
      }
    }
  for (size_t x = 0; x < dk.size(); ++x) g.dk.data<T>()[x] = static_cast<T>(dk[x]);
  for (size_t x = 0; x < dv.size(); ++x) g.dv.data<T>()[x] = static_cast<T>(dv[x]);
}

}  // namespace

void attention_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in) {
  if (p.dtype == DType::f32)
    backward<float>(g, p, in);
  else
    backward<double>(g, p, in);
}

}  // namespace qkv::ref
