// softmax_avx512bf16.cpp: the bf16 prefill's online softmax step, writing
// the weights straight into the bf16 pairs that pv_bf16_avx512 reads
// (contract in flash_bf16.h). Compiled with the AVX512-BF16 flags of
// flash_avx512bf16.cpp (CMakeLists.txt); only ever called after
// qkv::active_isa() said the CPU has AVX512-BF16.
//
// The float32 softmax stores the weights into St and pack_p_bf16_avx512 then
// reads them back to round them into pairs; here each pair of keys is
// exponentiated and converted while in registers. The arithmetic is the
// float32 softmax's column-vector form (ncols > 4), in the same order
// (vexp.h, the sum over keys in key order), so the weights and (m, l) are
// bitwise the same.
#include "core/kernels/avx512/vec_avx512.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/vexp.h"
#include "core/simd/bf16_pairs_avx512.h"

namespace qkv::kernels {

void softmax_pairs_bf16_avx512(uint32_t* P2, const float* St, int64_t nj, int ncols, float* m,
                               float* l, float* alpha) {
  const int nvec = (ncols + V::W - 1) / V::W;
  for (int v = 0; v < nvec; ++v) {
    const int c = v * V::W;
    const V::reg m_old = V::load(m + c);
    V::reg mx = m_old;
    for (int64_t j = 0; j < nj; ++j) mx = V::max(mx, V::load(St + j * kBR + c));
    // A column with no finite score yet subtracts 0: exp(-inf) = 0, not NaN.
    const V::reg base = V::zero_if_neg_inf(mx);
    V::reg sum = V::zero();
    for (int64_t t = 0; t < bf16_pairs(nj); ++t) {
      const V::reg a = vexp<V>(V::sub(V::load(St + 2 * t * kBR + c), base));
      sum = V::add(sum, a);
      V::reg b = V::zero();  // odd nj: the last pair's high half is 0
      if (2 * t + 1 < nj) {
        b = vexp<V>(V::sub(V::load(St + (2 * t + 1) * kBR + c), base));
        sum = V::add(sum, b);
      }
      _mm512_storeu_si512(P2 + t * kBR + c, simd::bf16_pair_words(a, b));
    }
    const V::reg a = vexp<V>(V::sub(m_old, base));
    V::store(alpha + c, a);
    V::store(l + c, V::fmadd(a, V::load(l + c), sum));
    V::store(m + c, mx);
  }
}

}  // namespace qkv::kernels
