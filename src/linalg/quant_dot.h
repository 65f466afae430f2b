// linalg/quant_dot.h: the dot products of a quantized weight row with a row
// of activations quantized to int8 (qkv/weight.h), on each path.
//
// The activations' two formats (ggml's, so that the products are
// llama.cpp's, but for Q5_1's offset term):
//   Q8_0 (beside Q8_0, Q4_0, Q5_0 and Q5_1 weights): blocks of 32 int8
//     and an f16 scale, the reference quantizer of linalg/rows.h (Q5_1's
//     offset multiplies the block's Σ qx: llama.cpp's Q8_1 carries that
//     sum, qkv sums the int8s);
//   Q8_K (beside the K-quants): blocks of 256 int8 with a float32 scale,
//     and the sum of each 16 of them, which the mins of Q4_K and Q5_K and
//     Q6_K's offset of 32 multiply (their sums never touch each weight).
#pragma once

#include <cstdint>

namespace qkv::linalg {

struct BlockQ8K {
  float d;            // x = d * qs
  int8_t qs[256];     // in -127..127
  int16_t bsums[16];  // bsums[i] = qs[16 i] + ... + qs[16 i + 15]
};

// Activations x [K] (K a multiple of 32) to Q8_0 blocks: the reference
// quantizer's bits (linalg/rows.h), but a block holding a non-finite x
// gets a NaN scale, so that every product with it is NaN, never a number.
void quantize_q8_0_x(const float* x, void* blocks, int64_t K);

// Activations x [K] (K a multiple of 256) to K / 256 blocks: d = amax / 127,
// qs = x / d rounded to nearest. A non-finite x makes its block's d NaN, so
// that every product with it is NaN, never a number.
void quantize_q8_k(const float* x, BlockQ8K* y, int64_t K);

// The dots of n weight rows (1 <= n <= kDotRows; row r's blocks of its
// type at w + r * stride) with one row of K activations in the type's
// activation format at x (Q8_0 blocks, or BlockQ8K): out[r]. Where x has
// many rows, each weight row is read from cache once per row of x: taking
// several weight rows a call shares x's loads and its scale between them,
// and their sums run in independent chains. The first row of x reads each
// weight row from memory, one row a call (weight_matmul.cpp says why).
// Each row's sum is the same whatever n.
constexpr int kDotRows = 4;
using DotFn = void (*)(const uint8_t* w, uint64_t stride, int n, const void* x, int64_t K, float* out);

// A DotFn from the dot of one row, for the types whose kernels take a row
// at a time.
template <float (*Dot)(const void* w, const void* x, int64_t K)>
void each_row(const uint8_t* w, uint64_t stride, int n, const void* x, int64_t K, float* out) {
  for (int r = 0; r < n; ++r) out[r] = Dot(w + r * stride, x, K);
}

// The dots of kDotRows weight rows (as DotFn's) with kTileRowsX rows of
// activations (row m's at x + m * x_stride bytes, Q8_0 blocks or
// BlockQ8K): out[m * ldo + r]. A short prompt's rows (longer ones go by
// the panels of linalg/quant_panel.h) share each weight row's unpacking
// and each x row's scales; every output is summed by the DotFn's
// operations, with the same bits.
constexpr int kTileRowsX = 4;
using TileFn = void (*)(const uint8_t* w, uint64_t stride, const uint8_t* x, uint64_t x_stride, int64_t K, float* out,
                        int64_t ldo);

// n weights (a multiple of the block) to float32: the reference
// dequantizer's bits (linalg/rows.h).
using DequantFn = void (*)(const void* blocks, float* out, int64_t n);

struct PanelKernels;  // linalg/quant_panel.h

// Quantizers of activations, as quantize_q8_0_x's and quantize_q8_k's.
using QuantizeX8_0Fn = void (*)(const float* x, void* blocks, int64_t K);
using QuantizeX8_KFn = void (*)(const float* x, BlockQ8K* y, int64_t K);
// The AVX2 path's (kernels/quant_x_avx2.cpp): the same bits.
void quantize_q8_0_x_avx2(const float* x, void* blocks, int64_t K);
void quantize_q8_k_avx2(const float* x, BlockQ8K* y, int64_t K);

// One path's dots and dequantizers, by weight type; a null dequantizer is
// the reference's.
struct DotKernels {
  DotFn q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k;
  DequantFn dequantize_q8_0, dequantize_q4_0, dequantize_q4_k, dequantize_q5_k, dequantize_q6_k;
  TileFn tile_q8_0, tile_q4_0, tile_q4_k, tile_q5_k, tile_q6_k;  // null: the DotFn a row of x at a time
  const PanelKernels *panel_q8_0, *panel_q4_0, *panel_q4_k, *panel_q5_k, *panel_q6_k;  // null: none
  QuantizeX8_0Fn quantize_x8_0;
  QuantizeX8_KFn quantize_x8_k;
};
extern const DotKernels dot_scalar;  // quant_dot_scalar.cpp: any x86-64
extern const DotKernels dot_avx2;    // kernels/quant_dot_avx2.cpp: AVX2 and FMA
// kernels/quant_dot_avx512vnni.cpp: AVX-512 with VNNI; a null entry is AVX2's.
extern const DotKernels dot_avx512vnni;

// The dots of active_isa()'s path: AVX512-VNNI's (with AVX2's where it has
// none) from avx512 up on a CPU with AVX512-VNNI, else AVX2's from avx2 up.
const DotKernels& dot_kernels();
// Its name: "avx512vnni", "avx2" or "scalar".
const char* dot_kernels_name();

}  // namespace qkv::linalg
