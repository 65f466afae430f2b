// gemm_bf16_kernels.h: the SIMD pieces of gemm_bf16 (src/linalg/gemm_bf16.cpp),
// as tables of function pointers that a path's IsaKernels (core/isa_kernels.h)
// points at: the AVX512-BF16 packing and micro-tile (kernels/avx512bf16/
// gemm_bf16_avx512.cpp) on avx512bf16 and amx, the AMX block (kernels/amx/
// gemm_bf16_amx.cpp) on amx only.
//
// vdpbf16ps multiplies two pairs of bf16 and adds both products to a float32
// lane, so both operands are stored as "pairs": a 32-bit word holding the
// elements k = 2p (low half) and k = 2p + 1 (high half) of one row of op(A)
// or one column of op(B). With K odd the last pair's high half is 0 on both
// sides. Rounding from float32 is to nearest even (vcvtneps2bf16), NaN stays
// NaN.
#pragma once

#include <cstdint>

namespace qkv::kernels::bf16gemm {

// Columns of C one micro-tile covers (four zmm of float32), and its rows.
constexpr int64_t kNR = 64;
constexpr int kMR = 6;

inline int64_t pairs(int64_t K) { return (K + 1) / 2; }

// The parts of a K sum a tile call makes (PairGemmKernels::tile).
constexpr int kSliceStarts = 1, kSliceEnds = 2, kWholeK = kSliceStarts | kSliceEnds;

// The four packings of one operand type: float32 (rounded to nearest even)
// or bfloat16 bit patterns (a Linear layer's input stored rounded by its
// producer: no rounding, the words built from the halves as they are).
template <class T>
struct PairPacking {
  // Pairs along rows: dst[r * dst_ld + p] = (src[r][2p], src[r][2p + 1]) for
  // r < R, p < pairs(K). src [R][K], rows ld apart. For op(A) = A.
  void (*rows_to_pairs)(const T* src, int64_t ld, int64_t R, int64_t K, uint32_t* dst,
                        int64_t dst_ld);

  // Pairs across rows: dst[p * dst_ld + w] = (src[2p][w], src[2p + 1][w]) for
  // p < pairs(K), w < W; columns W .. dst_ld - 1 are zeroed. src [K][W], rows
  // ld apart. For op(A) = Aᵀ and op(B) = B.
  void (*interleave_rows)(const T* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst,
                          int64_t dst_ld);

  // Pairs along rows, stored across: dst[p * dst_ld + w] = (src[w][2p],
  // src[w][2p + 1]) for p < pairs(K) and the rows w in [w0, w1) (w0 a multiple
  // of 16), rounded up to 16 columns with zeros past W (never past dst_ld). src
  // [W][K], rows ld apart. For op(B) = Bᵀ (B [N, K], the forward's weights):
  // each pair is adjacent in memory, so one 64-bit gather fetches eight.
  void (*gather_pairs)(const T* src, int64_t ld, int64_t W, int64_t K, int64_t w0, int64_t w1,
                       uint32_t* dst, int64_t dst_ld);

  // Pairs across rows, stored along rows: dst[w * dst_ld + p] = (src[2p][w],
  // src[2p + 1][w]) for w < W, p < pairs(K); the rest of each dst row is left
  // as it is. src [K][W], rows ld apart. For op(A) = Aᵀ on AMX, whose A tiles
  // hold each row's pairs along the row: interleave_rows, transposed.
  void (*transpose_pairs)(const T* src, int64_t ld, int64_t K, int64_t W, uint32_t* dst,
                          int64_t dst_ld);
};

// A pair word read where bf16 values were stored (op(A) = A in bfloat16
// with K and lda even is used in place, unpacked): may_alias, so the loads
// are not assumed independent of stores made through other types, and
// aligned as a bf16 (2 bytes): a caller's array need not be 4-aligned.
typedef uint32_t __attribute__((__may_alias__, __aligned__(2))) pair_word;

// The vdpbf16ps path: both operands' packings and the micro-tile.
struct PairGemmKernels {
  PairPacking<float> from_f32;
  PairPacking<uint16_t> from_bf16;

  // One micro-tile: C[r][j] = alpha * sum_p dot(a(r, p), b(p, j)) + beta *
  // C[r][j]
  // (+ bias[j], rounded separately, when bias is not null) for r < rows <=
  // kMR, j < cols <= kNR (beta = 0 never reads C).
  //   a(r, p) = a[r * a_rs + p * a_ks]   (pairs of op(A); rows of the tile)
  //   b(p, j) = b[p * b_ks + j]          (pairs of op(B); kNR columns readable)
  // The K sum of each element runs in order p = 0 .. np - 1 in float32.
  // `slice` (kWholeK, or the flags below) lets a caller cut a long K sum
  // into slices, one call each: a slice that does not start it begins from
  // the float32 sums left in C, one that does not end it stores its sums
  // there as they are (no alpha, beta or bias). The additions, and so the
  // bits, are those of one call over the whole K; beta must then be 0.
  void (*tile)(const pair_word* a, int64_t a_rs, int64_t a_ks, int rows, const uint32_t* b,
               int64_t b_ks, int64_t np, int cols, float alpha, float beta, const float* bias,
               float* c, int64_t ldc, int slice);
};

// The AMX path: blocks of C on tiles, from the pairs PairGemmKernels packs.
struct AmxGemmKernels {
  // The calling thread's tile configuration loaded (begin) and released
  // (end) around its block calls.
  void (*begin)();
  void (*end)();

  // One block of C of rows <= 32 x cols <= 32:
  // C[r][j] = alpha * sum_p dot(a(r, p), b(p, j)) + beta * C[r][j] (+ bias[j]),
  // rounded as PairGemmKernels::tile rounds, with
  //   a(r, p) = a[r * a_ld + p]  (op(A)'s pairs, row-major: 16 rows, or 32 when
  //                               rows > 16, of np16 words readable)
  //   b(p, j) = b[p * b_ld + j]  (op(B)'s pairs: np16 rows of 32 words
  //   readable)
  // np16 a multiple of 16 with zero pairs past the operands' own (on both
  // sides: a NaN times 0 is NaN). The sums run in the tiles' order.
  void (*block)(const uint32_t* a, int64_t a_ld, const uint32_t* b, int64_t b_ld, int64_t np16,
                int rows, int cols, float alpha, float beta, const float* bias, float* c,
                int64_t ldc);
};

// The tables of the two files above, which the paths' IsaKernels point at
// (kernels/<isa>/isa_table.cpp).
extern const PairGemmKernels pair_gemm_avx512bf16;
extern const AmxGemmKernels amx_gemm;

}  // namespace qkv::kernels::bf16gemm
