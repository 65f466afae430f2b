/// @file
/// qkv/weight.h: a matrix of weights stored in any weight type
/// (qkv/weight_type.h), and the one product every Linear layer of a
/// quantized model runs: out = x · Wᵀ + bias.
///
/// Glossary: M rows of activations x [M, K]; a weight W [N, K] (a Linear's
/// [out, in]) given as runs of rows, each run a Weight of its own type (a
/// Llama's q, k and v are three tensors of its file, one matrix here).
///
/// How the product is computed (the same way as llama.cpp computes it, so a
/// GGUF file gives llama.cpp's numbers): each row of x is quantized once per
/// call, per block, to int8 with a float scale, and each output is a sum of
/// integer dot products of blocks, each scaled by the two blocks' scales:
///   Q8_0, Q4_0 weights       beside x in Q8_0 (32 per block, f16 scale)
///   Q4_K, Q5_K, Q6_K weights beside x in Q8_K (256 per block, f32 scale,
///                            and the sums of each 16 of its integers)
///   F32, F16, BF16 weights   beside x as it is, in float32
/// The error against the float64 product of the dequantized weights is
/// mostly the rounding of x to int8: at most half a step of its block's
/// scale (amax / 127, the f16 rounding of a Q8_0 scale aside) for each
/// element of x, times its weight; tests/test_weight_matmul.cpp states the
/// bound it checks on every path.
///
/// Threads: the caller's OpenMP threads share the N outputs of each row in
/// fixed ranges, each output one thread's whole sum: the same bits for any
/// thread count, and for any M below 16 (from 16 rows the types of
/// weight_matmul_tiles sum in another order, within the bound). The path is active_isa()'s (qkv/runtime.h):
/// scalar, AVX2 from avx2 up, AVX512-VNNI from avx512 up where the CPU has
/// it (cpu_has(CpuFeature::avx512_vnni); Q5_0 and Q5_1 stay AVX2's there);
/// the paths sum in different orders.
#pragma once

#include <cstdint>
#include <span>

#include "qkv/export.h"
#include "qkv/weight_type.h"

namespace qkv {

/// A matrix [rows, cols] stored as `type`: row r is weight_bytes(type, cols)
/// bytes at data + r * that. The bytes are not owned (a mapped file or a
/// buffer of the caller's).
struct Weight {
  WeightType type = WeightType::f32;  ///< how each row is stored
  int64_t rows = 0;                   ///< N: outputs (a Linear's out)
  int64_t cols = 0;                   ///< K: weights a row (a Linear's in), a multiple of the type's block
  const void* data = nullptr;         ///< row 0's first byte
  /// The bytes of one row.
  uint64_t row_bytes() const { return weight_bytes(type, cols); }
  /// Where row r starts.
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<uint64_t>(r) * row_bytes();
  }
};

/// out [M, N] = x [M, K] · Wᵀ + bias (bias [N], or null), W the runs of `w`
/// stacked (N their rows, K = each run's cols); out and x rows N and K
/// apart. qkv::Error, before anything is written, when a run's cols is not
/// K, K is not a multiple of a run's block, or a size is negative.
QKV_API void weight_matmul(float* out, const float* x, int64_t M, int64_t K, std::span<const Weight> w,
                           const float* bias);

/// True where weight_matmul, on the active path, runs many rows of x
/// against `type` with each weight unpacked once for all of them (Q8_0,
/// Q4_0, Q4_K, Q5_K and Q6_K on AVX512-VNNI: from 16 rows of x, panels of
/// 16 weight rows, each repacked once and shared by every row of x; from 4,
/// tiles of 4 rows of x by 4 weight rows), so that a long prompt runs
/// faster there than as the float32 GEMM of the weights dequantized (the
/// name is the tiles', which came first). The same bits for any thread
/// count and for a row wherever it stands among the others; a call of 16
/// rows or more sums in another order than one of fewer, within the bound.
QKV_API bool weight_matmul_tiles(WeightType type);

/// Rows [r0, r0 + n) of w as float32 at out [n, cols]: the bits of
/// dequantize_row (the reference), on the active path's vector code where it
/// has one, the rows split between the caller's OpenMP threads.
QKV_API void dequantize_rows(const Weight& w, int64_t r0, int64_t n, float* out);

}  // namespace qkv
