// The quantized dot products in plain C++ (the scalar path), and the Q8_K
// quantizer of activations. Each block's integer sum is exact; the blocks'
// scaled sums are added in order, in float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "linalg/half.h"
#include "linalg/k_scales.h"
#include "linalg/quant_dot.h"
#include "linalg/quant_panel.h"
#include "linalg/rows.h"
#include "qkv/runtime.h"

namespace qkv::linalg {

void quantize_q8_0_x(const float* x, void* blocks, int64_t K) {
  auto* b = static_cast<uint8_t*>(blocks);
  for (int64_t i = 0; i < K / 32; ++i, x += 32, b += 34) {
    bool finite = true;
    for (int j = 0; j < 32; ++j) finite = finite && std::isfinite(x[j]);
    if (finite) {
      quantize_q8_0(x, b, 32);
      continue;
    }
    put_f16(b, 0x7e00);  // NaN
    std::memset(b + 2, 0, 32);
  }
}

void quantize_q8_k(const float* x, BlockQ8K* y, int64_t K) {
  for (int64_t i = 0; i < K / 256; ++i, x += 256, ++y) {
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < 256; ++j) {
      finite = finite && std::isfinite(x[j]);
      amax = std::max(amax, std::fabs(x[j]));
    }
    if (!finite) {  // its products NaN, whatever the integers
      *y = BlockQ8K{NAN, {}, {}};
      continue;
    }
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    y->d = amax / 127.0f;
    // Clamped as a float, NaN as 0: a block whose amax is under 2^-121 has
    // an id of inf, and a cast of inf to int is undefined.
    for (int j = 0; j < 256; ++j) {
      const float q = std::nearbyint(x[j] * id);
      y->qs[j] = static_cast<int8_t>(std::isnan(q) ? 0 : std::clamp(q, -127.0f, 127.0f));
    }
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y->qs[16 * s + j];
      y->bsums[s] = static_cast<int16_t>(sum);
    }
  }
}

void panel_sums_q8_0(const uint8_t* blocks, int64_t K, float* scale, int32_t* sums) {
  for (int64_t b = 0; b < K / 32; ++b, blocks += 34) {
    scale[b] = f16_at(blocks);
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += static_cast<int8_t>(blocks[2 + j]);
    sums[b] = s;
  }
}

void panel_sums_q8_k(const BlockQ8K* blocks, int64_t K, int32_t* sums, float* sums32) {
  for (int64_t i = 0; i < K / 16; ++i) sums[i] = blocks[i / 16].bsums[i % 16];
  for (int64_t j = 0; j < K / 32; ++j) sums32[j] = static_cast<float>(sums[2 * j] + sums[2 * j + 1]);
}

namespace {

// Q8_0 · Q8_0: per block, d_w d_x Σ qw qx.
float dot_q8_0(const void* w, const void* x, int64_t K) {
  const auto *a = static_cast<const uint8_t*>(w), *b = static_cast<const uint8_t*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < K / 32; ++i, a += 34, b += 34) {
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += static_cast<int8_t>(a[2 + j]) * static_cast<int8_t>(b[2 + j]);
    sum += f16_at(a) * f16_at(b) * static_cast<float>(isum);
  }
  return sum;
}

// Q4_0 · Q8_0: per block, d_w d_x Σ (qw - 8) qx.
float dot_q4_0(const void* w, const void* x, int64_t K) {
  const auto *a = static_cast<const uint8_t*>(w), *b = static_cast<const uint8_t*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < K / 32; ++i, a += 18, b += 34) {
    int isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += ((a[2 + j] & 15) - 8) * static_cast<int8_t>(b[2 + j]) +
              ((a[2 + j] >> 4) - 8) * static_cast<int8_t>(b[18 + j]);
    sum += f16_at(a) * f16_at(b) * static_cast<float>(isum);
  }
  return sum;
}

// Q5_0 and Q5_1 · Q8_0: per block, d_w d_x Σ (qw - 16) qx for Q5_0, and
// d_w d_x Σ qw qx + m d_x Σ qx for Q5_1 (m its offset).
template <bool kOffset>
float dot_q5(const void* w, const void* x, int64_t K) {
  constexpr int kBytes = kOffset ? 24 : 22, kQh = kOffset ? 4 : 2;
  const auto *a = static_cast<const uint8_t*>(w), *b = static_cast<const uint8_t*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < K / 32; ++i, a += kBytes, b += 34) {
    int q[32];
    unpack_q5(a + kQh, a + kQh + 4, q);
    int isum = 0, xsum = 0;
    for (int j = 0; j < 32; ++j) {
      const int qx = static_cast<int8_t>(b[2 + j]);
      isum += (q[j] - (kOffset ? 0 : 16)) * qx;
      xsum += qx;
    }
    sum += f16_at(a) * f16_at(b) * static_cast<float>(isum);
    if constexpr (kOffset) sum += f16_at(a + 2) * f16_at(b) * static_cast<float>(xsum);
  }
  return sum;
}

// Q4_K and Q5_K · Q8_K: per super-block, with sub-block j's 32 weights
// (d sc_j) q - (dmin m_j):
//   d d_x Σ_j sc_j Σ q qx  -  dmin d_x Σ_j m_j (bsums[2j] + bsums[2j + 1]).
template <bool kFifthBit>
float dot_q45_k(const void* w, const void* x, int64_t K) {
  constexpr int kBytes = kFifthBit ? 176 : 144, kQs = kFifthBit ? 48 : 16;
  const auto* a = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < K / 256; ++i, a += kBytes, ++y) {
    int isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin s = scale_min(a + 4, j);
      const uint8_t* chunk = a + kQs + 32 * (j / 2);
      int sub = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (chunk[l] >> (4 * (j % 2))) & 15;
        if constexpr (kFifthBit) q |= ((a[16 + l] >> j) & 1) << 4;
        sub += q * y->qs[32 * j + l];
      }
      isum += s.sc * sub;
      msum += s.m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    sum += f16_at(a) * y->d * static_cast<float>(isum) - f16_at(a + 2) * y->d * static_cast<float>(msum);
  }
  return sum;
}

// Q6_K · Q8_K: per super-block, d d_x Σ_i scales[i] Σ (q - 32) qx over its
// 16 sub-blocks of 16.
float dot_q6_k(const void* w, const void* x, int64_t K) {
  const auto* a = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const BlockQ8K*>(x);
  float sum = 0.0f;
  for (int64_t i = 0; i < K / 256; ++i, a += 210, ++y) {
    const auto* scales = reinterpret_cast<const int8_t*>(a + 192);
    int isum = 0;
    for (int s = 0; s < 16; ++s) {
      int sub = 0;
      for (int v = 16 * s; v < 16 * s + 16; ++v) {
        const int h = v / 128, k = (v % 128) / 32, l = v % 32;
        const int low = (a[64 * h + l + 32 * (k % 2)] >> (k < 2 ? 0 : 4)) & 15;
        const int high = (a[128 + 32 * h + l] >> (2 * k)) & 3;
        sub += ((low | high << 4) - 32) * y->qs[v];
      }
      isum += scales[s] * sub;
    }
    sum += f16_at(a + 208) * y->d * static_cast<float>(isum);
  }
  return sum;
}

}  // namespace

const DotKernels dot_scalar = {each_row<dot_q8_0>,
                               each_row<dot_q4_0>,
                               each_row<dot_q5<false>>,
                               each_row<dot_q5<true>>,
                               each_row<dot_q45_k<false>>,
                               each_row<dot_q45_k<true>>,
                               each_row<dot_q6_k>,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               quantize_q8_0_x,
                               quantize_q8_k};

namespace {

// `fast`, its null entries taken from `base`.
DotKernels over(const DotKernels& fast, const DotKernels& base) {
  DotKernels k = fast;
  for (DotFn DotKernels::*f : {&DotKernels::q8_0, &DotKernels::q4_0, &DotKernels::q5_0, &DotKernels::q5_1,
                               &DotKernels::q4_k, &DotKernels::q5_k, &DotKernels::q6_k})
    if (!(k.*f)) k.*f = base.*f;
  for (DequantFn DotKernels::*f : {&DotKernels::dequantize_q8_0, &DotKernels::dequantize_q4_0, &DotKernels::dequantize_q4_k,
                                   &DotKernels::dequantize_q5_k, &DotKernels::dequantize_q6_k})
    if (!(k.*f)) k.*f = base.*f;
  if (!k.quantize_x8_0) k.quantize_x8_0 = base.quantize_x8_0;
  if (!k.quantize_x8_k) k.quantize_x8_k = base.quantize_x8_k;
  return k;
}

// cpu_has first: it reads QKV_DISABLE, whose bad names are errors whatever the path.
bool vnni_active() { return cpu_has(CpuFeature::avx512_vnni) && active_isa() >= Isa::avx512; }

}  // namespace

const DotKernels& dot_kernels() {
  static const DotKernels vnni = over(dot_avx512vnni, dot_avx2);
  if (vnni_active()) return vnni;
  return active_isa() == Isa::scalar ? dot_scalar : dot_avx2;
}

const char* dot_kernels_name() {
  if (vnni_active()) return "avx512vnni";
  return active_isa() == Isa::scalar ? "scalar" : "avx2";
}

}  // namespace qkv::linalg
