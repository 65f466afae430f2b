// residual.cpp: the residual stream's sum. Its backward is the identity: the
// caller adds the same gradient to both branches (the += contract of nn.h).
#include <type_traits>

#include "model/layers/nn_common.h"
#include "model/layers/nn_ref.h"
#include "qkv/nn.h"

namespace qkv::nn {

namespace ref {

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t N) {
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

template void residual_forward(float*, const float*, const float*, int64_t);
template void residual_forward(double*, const double*, const double*, int64_t);

}  // namespace ref

// out [N] = a + b; out may be a or b (the trainer adds in place). Elementwise,
// so float32 only adds threads for large N.
template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t N) {
  if constexpr (std::is_same_v<T, float>) {
#pragma omp parallel for schedule(static) if (N >= detail::kParallelMin)
    for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
  } else {
    ref::residual_forward(out, a, b, N);
  }
}

template void residual_forward(float*, const float*, const float*, int64_t);
template void residual_forward(double*, const double*, const double*, int64_t);

}  // namespace qkv::nn
