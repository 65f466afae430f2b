// flash_scalar.cpp: the portable micro-kernels, for CPUs without AVX2 and as
// the plainest statement of each kernel's contract (flash_kernels.h).
#include <cmath>
#include <cstring>

#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {
namespace {

void qk(float* St, const float* K, int64_t ldk, int64_t nj, const float* Qt, int64_t D,
        int ncols) {
  for (int64_t j = 0; j < nj; ++j) {
    float* s = St + j * kBR;
    for (int i = 0; i < ncols; ++i) s[i] = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      const float kd = K[j * ldk + d];
      const float* q = Qt + d * kBR;
      for (int i = 0; i < ncols; ++i) s[i] += kd * q[i];
    }
  }
}

void qk_rows(float* St, const float* K, int64_t ldk, int64_t nj, const float* Q, int64_t D,
             int ncols) {
  for (int64_t j = 0; j < nj; ++j)
    for (int i = 0; i < ncols; ++i) {
      float acc = 0.0f;
      for (int64_t d = 0; d < D; ++d) acc += K[j * ldk + d] * Q[i * D + d];
      St[j * kBR + i] = acc;
    }
}

void softmax(float* St, int64_t nj, int ncols, float* m, float* l, float* alpha) {
  for (int i = 0; i < ncols; ++i) {
    float mx = m[i];
    for (int64_t j = 0; j < nj; ++j) mx = std::fmax(mx, St[j * kBR + i]);
    // With no finite score yet, subtract 0: exp(-inf - 0) = 0, never NaN.
    const float base = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < nj; ++j) {
      const float p = std::exp(St[j * kBR + i] - base);
      St[j * kBR + i] = p;
      sum += p;
    }
    alpha[i] = std::exp(m[i] - base);
    l[i] = alpha[i] * l[i] + sum;
    m[i] = mx;
  }
}

void pv(float* O, const float* P, int64_t nj, int ncols, const float* V, int64_t ldv, int64_t Dv,
        const float* alpha) {
  for (int i = 0; i < ncols; ++i) {
    float* o = O + i * Dv;
    for (int64_t e = 0; e < Dv; ++e) o[e] *= alpha[i];
    for (int64_t j = 0; j < nj; ++j) {
      const float p = P[j * kBR + i];
      for (int64_t e = 0; e < Dv; ++e) o[e] += p * V[j * ldv + e];
    }
  }
}

void weights(float* W, int64_t ldw, const float* St, int64_t nj, int ncols, const float* lse) {
  for (int i = 0; i < ncols; ++i)
    for (int64_t j = 0; j < nj; ++j)
      W[i * ldw + j] = lse[i] == -INFINITY ? 0.0f : std::exp(St[j * kBR + i] - lse[i]);
}

void probs(float* St, int64_t nj, int ncols, const float* lse) {
  for (int64_t j = 0; j < nj; ++j)
    for (int i = 0; i < ncols; ++i) {
      float& s = St[j * kBR + i];
      s = lse[i] == -INFINITY ? 0.0f : std::exp(s - lse[i]);
    }
}

void dscores(float* dS, const float* P, int64_t nj, int ncols, const float* Dd, const float* dcap,
             float scale) {
  for (int64_t j = 0; j < nj; ++j)
    for (int i = 0; i < ncols; ++i) {
      const int64_t x = j * kBR + i;
      float g = P[x] * (dS[x] - Dd[i]) * scale;
      if (dcap) g *= dcap[x];
      dS[x] = g;
    }
}

void mac(float* C, int64_t ldc, const float* A, int64_t ar, int64_t at, const float* B,
         int64_t ldb, int64_t nr, int64_t nt, int64_t ne) {
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t t = 0; t < nt; ++t) {
      const float a = A[r * ar + t * at];
      for (int64_t e = 0; e < ne; ++e) C[r * ldc + e] += a * B[t * ldb + e];
    }
}

void widen_bf16(float* dst, int64_t ldd, const uint16_t* src, int64_t lds, int64_t rows,
                int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t u = static_cast<uint32_t>(src[r * lds + c]) << 16;
      std::memcpy(dst + r * ldd + c, &u, sizeof u);
    }
}

void check_scores(const float* St, int64_t nj, int ncols, float* acc) {
  for (int64_t j = 0; j < nj; ++j)
    for (int c = 0; c < ncols; ++c) acc[0] += St[j * kBR + c] - St[j * kBR + c];
}

}  // namespace

constinit const FlashKernels flash_scalar{qk, qk_rows, softmax, pv, weights,
                                   probs, dscores, mac, widen_bf16, check_scores};

}  // namespace qkv::kernels
