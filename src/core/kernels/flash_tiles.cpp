#include "core/kernels/flash_tiles.h"

#include <cmath>

namespace qkv::kernels {

void mask_tile(const AttentionProblem& p, const TileRows& t, int64_t j0, int64_t nj, float* St,
               float* dcap) {
  const Tensor* mask = p.mask.tensor;
  const bool bool_mask = mask && mask->dtype() == DType::boolean;
  const float cap = static_cast<float>(p.softcap);
  for (int r = 0; r < t.rows; ++r) {
    const int64_t h = t.h0 + r / t.npos, i = t.i0 + r % t.npos;
    const int64_t first = p.first_key(i), last = p.last_key(t.b, i);
    const int64_t mrow = mask ? p.mask.head_offset[t.b * p.Hq + h] + i * p.mask.stride_n : 0;
    for (int64_t jj = 0; jj < nj; ++jj) {
      const int64_t j = j0 + jj;
      float& s = St[jj * kBR + r];
      if (j < first || j > last) {
        s = -INFINITY;
        if (dcap) dcap[jj * kBR + r] = 0.0f;
        continue;
      }
      if (cap > 0.0f) {
        const float th = std::tanh(s / cap);
        s = cap * th;
        if (dcap) dcap[jj * kBR + r] = 1.0f - th * th;
      } else if (dcap) {
        dcap[jj * kBR + r] = 1.0f;
      }
      if (p.alibi_slopes) s += static_cast<float>(p.alibi(h, i, j));
      if (mask) {
        const int64_t m = mrow + j * p.mask.stride_s;
        if (bool_mask) {
          if (!mask->data<bool>()[m]) s = -INFINITY;
        } else {
          s += static_cast<float>(mask->get(m));
        }
      }
    }
  }
}

}  // namespace qkv::kernels
