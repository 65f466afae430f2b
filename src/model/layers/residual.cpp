// residual.cpp: the residual stream's sum. Its backward is the identity: the
// caller adds the same gradient to both branches (the += contract of nn.h).
#include "model/layers/nn_common.h"
#include "qkv/nn.h"

namespace qkv::nn {

// out [N] = a + b; out may be a or b (the trainer adds in place).
void residual_forward(float* out, const float* a, const float* b, int64_t N) {
#pragma omp parallel for schedule(static) if (N >= detail::kParallelMin)
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

}  // namespace qkv::nn
