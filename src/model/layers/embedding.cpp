// embedding.cpp: token + learned position embeddings (a gather of table rows),
// forward and backward. Plain loops (float64) and a threaded float32 path.
#include <algorithm>
#include <type_traits>

#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

// ---- plain loops ---------------------------------------------------------

namespace ref {

// out [B, T, C] = wte [tokens [b, t]] + wpe [t] (wpe may be null).
template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C) {
  for (int64_t r = 0; r < B * Tn; ++r) {
    const T* e = wte + static_cast<int64_t>(tokens[r]) * C;
    T* y = out + r * C;
    if (wpe) {
      const T* p = wpe + (r % Tn) * C;
      for (int64_t c = 0; c < C; ++c) y[c] = e[c] + p[c];
    } else {
      std::copy(e, e + C, y);  // a gather: no rounding at all
    }
  }
}

// dwte [tokens [b, t]] += dout [b, t]; dwpe [t] += dout [b, t] (dwpe may be null).
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t Tn, int64_t C) {
  for (int64_t r = 0; r < B * Tn; ++r) {
    T* e = dwte + static_cast<int64_t>(tokens[r]) * C;
    for (int64_t c = 0; c < C; ++c) {
      e[c] += dout[r * C + c];
      if (dwpe) dwpe[(r % Tn) * C + c] += dout[r * C + c];
    }
  }
}

template void embedding_forward(float*, const int32_t*, const float*, const float*, int64_t,
                                int64_t, int64_t);
template void embedding_forward(double*, const int32_t*, const double*, const double*, int64_t,
                                int64_t, int64_t);
template void embedding_backward(float*, float*, const float*, const int32_t*, int64_t, int64_t,
                                 int64_t);
template void embedding_backward(double*, double*, const double*, const int32_t*, int64_t,
                                 int64_t, int64_t);

}  // namespace ref

// ---- float32: rows, or blocks of channels, on threads ----------------------

namespace {

void fast_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                  int64_t B, int64_t Tn, int64_t C) {
#pragma omp parallel for schedule(static) if (B * Tn * C >= detail::kParallelMin)
  for (int64_t r = 0; r < B * Tn; ++r) {
    const float* e = wte + static_cast<int64_t>(tokens[r]) * C;
    float* y = out + r * C;
    if (wpe) {
      const float* p = wpe + (r % Tn) * C;
      for (int64_t c = 0; c < C; ++c) y[c] = e[c] + p[c];
    } else {
      std::copy(e, e + C, y);
    }
  }
}

// A token appears in many rows, so the scatter is split by channels: one
// thread per block of channels, rows in order (no atomics, same bits for any
// thread count).
void fast_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                   int64_t Tn, int64_t C) {
  constexpr int64_t CB = detail::kColBlock;
  const int64_t blocks = (C + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (B * Tn * C >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t lo = blk * CB, n = std::min(CB, C - lo);
    for (int64_t r = 0; r < B * Tn; ++r) {
      const float* d = dout + r * C + lo;
      float* e = dwte + static_cast<int64_t>(tokens[r]) * C + lo;
      for (int64_t j = 0; j < n; ++j) e[j] += d[j];
      if (dwpe) {
        float* p = dwpe + (r % Tn) * C + lo;
        for (int64_t j = 0; j < n; ++j) p[j] += d[j];
      }
    }
  }
}

}  // namespace

// ---- the layer ---------------------------------------------------------------

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                       int64_t Tn, int64_t C) {
  if constexpr (std::is_same_v<T, float>)
    fast_forward(out, tokens, wte, wpe, B, Tn, C);
  else
    ref::embedding_forward(out, tokens, wte, wpe, B, Tn, C);
}

void embedding_forward(float* out, const int32_t* tokens, const bfloat16* wte, const float* wpe,
                       int64_t B, int64_t Tn, int64_t C) {
#pragma omp parallel for schedule(static) if (B * Tn * C >= detail::kParallelMin)
  for (int64_t r = 0; r < B * Tn; ++r) {
    const bfloat16* e = wte + static_cast<int64_t>(tokens[r]) * C;
    const float* p = wpe ? wpe + (r % Tn) * C : nullptr;
    float* y = out + r * C;
    for (int64_t c = 0; c < C; ++c) y[c] = p ? bf16_to_float(e[c]) + p[c] : bf16_to_float(e[c]);
  }
}

template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                        int64_t Tn, int64_t C) {
  if constexpr (std::is_same_v<T, float>)
    fast_backward(dwte, dwpe, dout, tokens, B, Tn, C);
  else
    ref::embedding_backward(dwte, dwpe, dout, tokens, B, Tn, C);
}

template void embedding_forward(float*, const int32_t*, const float*, const float*, int64_t,
                                int64_t, int64_t);
template void embedding_forward(double*, const int32_t*, const double*, const double*, int64_t,
                                int64_t, int64_t);
template void embedding_backward(float*, float*, const float*, const int32_t*, int64_t, int64_t,
                                 int64_t);
template void embedding_backward(double*, double*, const double*, const int32_t*, int64_t,
                                 int64_t, int64_t);

}  // namespace qkv::nn
