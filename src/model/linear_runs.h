// linear_runs.h: a Linear layer's forward with its weight [OC, C] given as
// runs of rows (model/gpt_work.h's RowRuns: a bf16 copy, or the tensors of a
// mapped checkpoint, where a Llama's q, k and v are three).
#pragma once

#include <cstdint>

#include "model/gpt_work.h"

namespace qkv {

// out [BT, OC] = inp [BT, C] · wᵀ + b (b [OC] or null), w's runs stacked
// making its OC rows: gemm_bf16 for a bf16 weight (inp float32 or bf16), or
// float32 sgemm with the bias written first (the float32 Linear's sums).
// Few rows (BT <= kDotRowsMax: a decoded token, a short text) run in one
// parallel region whose threads each take a contiguous range of the
// columns across the runs, each GEMM call inside it on its thread alone:
// one fork and join for the matrix, not one per run, and the bits of one
// GEMM over a single stacked weight (each element one thread's K sum).
void linear_runs(float* out, const float* inp, const RowRuns<bfloat16>& w, const float* b, int64_t BT,
                 int64_t C, int64_t OC);
void linear_runs(float* out, const bfloat16* inp, const RowRuns<bfloat16>& w, const float* b,
                 int64_t BT, int64_t C, int64_t OC);
void linear_runs(float* out, const float* inp, const RowRuns<float>& w, const float* b, int64_t BT,
                 int64_t C, int64_t OC);

// The same over quantized runs (a GGUF model's, qkv/weight.h). Few rows (a
// decoded token, a short text: BT < kQuantGemmRows) run weight_matmul's
// integer dot products, which read each weight once as stored. Many rows
// (a prompt's prefill) are compute-bound: where weight_matmul shares each
// weight's unpacking between rows of x for every run's type
// (weight_matmul_tiles) they run there too, faster
// than the float32 GEMM (Q8_0, Q4_0 and the K-quants on AVX512-VNNI;
// docs/benchmarks.md); elsewhere the weights are dequantized exactly, kQuantChunkRows
// rows at a time, into a float32 scratch that the float32 GEMM (sgemm)
// multiplies, each of its products reused by all BT rows. Both give the
// same bits for any thread count.
constexpr int64_t kQuantGemmRows = 32;
constexpr int64_t kQuantChunkRows = 256;
void linear_runs(float* out, const float* inp, const std::vector<Weight>& w, const float* b, int64_t BT,
                 int64_t C, int64_t OC);

}  // namespace qkv
