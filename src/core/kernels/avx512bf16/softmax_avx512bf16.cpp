// softmax_avx512bf16.cpp: the bf16 prefill's online softmax step, writing
// the weights straight into the bf16 pairs that pv_bf16_avx512 reads
// (contract in flash_bf16.h). Compiled with the AVX512-BF16 flags of
// flash_avx512bf16.cpp (CMakeLists.txt); only ever called after
// qkv::active_isa() said the CPU has AVX512-BF16.
//
// The float32 softmax stores the weights into St and pack_p_bf16_avx512 then
// reads them back to round them into pairs; here each pair of keys is
// exponentiated and converted while in registers. The arithmetic is the
// float32 softmax's column-vector form (ncols > 4): the same softmax_column
// (softmax_column.h), so the weights and (m, l) are bitwise the same.
#include "core/kernels/avx512/vec_avx512.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/softmax_column.h"
#include "core/simd/bf16_pairs_avx512.h"

namespace qkv::kernels {

void softmax_pairs_bf16_avx512(uint32_t* P2, const float* St, int64_t nj, int ncols, float* m,
                               float* l, float* alpha) {
  const int nvec = (ncols + V::W - 1) / V::W;
  for (int v = 0; v < nvec; ++v) {
    const int c = v * V::W;
    softmax_column<V>(St, nj, c, m, l, alpha, [&](int64_t t, V::reg a, V::reg b, bool) {
      _mm512_storeu_si512(P2 + t * kBR + c, simd::bf16_pair_words(a, b));  // odd nj: b = 0
    });
  }
}

}  // namespace qkv::kernels
