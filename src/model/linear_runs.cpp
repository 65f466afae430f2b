// linear_runs.cpp: a Linear layer's forward over a weight in runs of rows
// (contract in linear_runs.h).
#include "model/linear_runs.h"

#include <omp.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/gemm_dot_kernels.h"
#include "linalg/column_shares.h"
#include "linalg/gemm.h"
#include "linalg/gemm_common.h"
#include "qkv/error.h"

namespace qkv {
namespace {

// Columns [j0, j0 + n) of out from rows r0 .. r0 + n of a run: w [n, C]
// from its row r0, or for a run stored [C, rows] (in_out) wᵀ [C, n] from
// its column r0. A run in panels is always taken whole.
template <class TI, class E>
void piece(float* out, const TI* inp, const RowRun<E>& run, int64_t r0, const float* b, int64_t BT,
           int64_t C, int64_t OC, int64_t j0, int64_t n) {
  const float* bias = b ? b + j0 : nullptr;
  const bool in_out = run.layout == RunLayout::in_out;
  const E* w = in_out ? run.at + r0 : run.at + r0 * C;
  const int64_t ldw = in_out ? run.rows : C;
  if constexpr (std::is_same_v<E, bfloat16>) {
    linalg::gemm_bf16_bias(false, !in_out, BT, n, C, 1.0f, inp, C, w, ldw, 0.0f, bias, out + j0, OC);
  } else if (run.layout == RunLayout::panels) {
    linalg::sgemm_panels(BT, n, C, inp, C, run.at, bias, out + j0, OC);
  } else {
    linalg::sgemm_bias(false, !in_out, BT, n, C, 1.0f, inp, C, w, ldw, 0.0f, bias, out + j0, OC);
  }
}

template <class TI, class E>
void run_pieces(float* out, const TI* inp, const RowRuns<E>& w, const float* b, int64_t BT, int64_t C,
                int64_t OC) {
  // One GEMM a run, each threaded itself; a matrix in panels is one run
  // (GptLoader::pack_matrices), read whole.
  if (w.size() > 1)
    for (const RowRun<E>& run : w)
      if (run.layout == RunLayout::panels) throw Error("linear: a matrix in panels must be one run");
  if (BT > kernels::kDotRowsMax || w.size() == 1) {
    int64_t j0 = 0;
    for (const RowRun<E>& run : w) {
      piece(out, inp, run, 0, b, BT, C, OC, j0, run.rows);
      j0 += run.rows;
    }
    return;
  }
  // The runs' columns shared between the threads as one product's
  // (column_shares.h), each chunk cut where it crosses runs. bf16 runs keep
  // one share a thread: gemm_bf16 rounds a float32 input for each call.
  // So do runs stored [C, rows], read a short stretch of each row a chunk.
  const int threads = omp_get_max_threads();
  const bool in_out =
      std::any_of(w.begin(), w.end(), [](const RowRun<E>& r) { return r.layout == RunLayout::in_out; });
  const int64_t chunk = std::is_same_v<E, float> && !in_out
                            ? kernels::chunk_columns(C * int64_t{sizeof(E)}, kernels::kDotBlockColumns)
                            : kernels::share_columns(OC, threads, kernels::kDotBlockColumns);
  kernels::ColumnShares shares(OC, chunk, threads);
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    for (int64_t lo, hi; shares.next(t, lo, hi);) {
      int64_t j0 = 0;
      for (const RowRun<E>& run : w) {
        const int64_t s = std::max(lo, j0), e = std::min(hi, j0 + run.rows);
        if (s < e) piece(out, inp, run, s - j0, b, BT, C, OC, s, e - s);
        j0 += run.rows;
      }
    }
  }
}

}  // namespace

void linear_runs(float* out, const float* inp, const RowRuns<bfloat16>& w, const float* b, int64_t BT,
                 int64_t C, int64_t OC) {
  run_pieces(out, inp, w, b, BT, C, OC);
}

void linear_runs(float* out, const bfloat16* inp, const RowRuns<bfloat16>& w, const float* b,
                 int64_t BT, int64_t C, int64_t OC) {
  run_pieces(out, inp, w, b, BT, C, OC);
}

void linear_runs(float* out, const float* inp, const RowRuns<float>& w, const float* b, int64_t BT,
                 int64_t C, int64_t OC) {
  run_pieces(out, inp, w, b, BT, C, OC);
}

void linear_runs(float* out, const float* inp, const std::vector<Weight>& w, const float* b, int64_t BT,
                 int64_t C, int64_t OC) {
  int64_t rows = 0;
  for (const Weight& run : w) rows += run.rows;
  if (rows != OC) throw Error("linear: the quantized runs make " + std::to_string(rows) + " rows, not " + std::to_string(OC));
  if (BT < kQuantGemmRows || std::all_of(w.begin(), w.end(), [](const Weight& r) { return weight_matmul_tiles(r.type); }))
    return weight_matmul(out, inp, BT, C, w, b);
  thread_local std::vector<float> chunk;  // the caller's: allocated once, reused by every call
  if (chunk.size() < static_cast<size_t>(kQuantChunkRows * C)) chunk.resize(static_cast<size_t>(kQuantChunkRows * C));
  int64_t j0 = 0;
  for (const Weight& run : w) {
    for (int64_t r0 = 0; r0 < run.rows; r0 += kQuantChunkRows) {
      const int64_t n = std::min(kQuantChunkRows, run.rows - r0);
      float* dst = chunk.data();
      dequantize_rows(run, r0, n, dst);
      linalg::sgemm_bias(false, true, BT, n, C, 1.0f, inp, C, dst, C, 0.0f, b ? b + j0 + r0 : nullptr,
                          out + j0 + r0, OC);
    }
    j0 += run.rows;
  }
}

}  // namespace qkv
