// weight_matmul (qkv/weight.h): out = x · Wᵀ + bias over runs of weights of
// any type. Each call quantizes x's rows once into the formats its runs
// need, then the threads share the outputs, four weight rows at a time:
// each row's bytes are read from memory once per call and its dots with
// every row of x follow while it sits in L1.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "linalg/quant_dot.h"
#include "qkv/error.h"
#include "qkv/weight.h"

namespace qkv {
namespace {

using linalg::BlockQ8K;

// The format a type's dots read x in.
enum class XForm { f32, q8_0, q8_k };

XForm form_of(WeightType t) {
  switch (t) {
    case WeightType::q8_0:
    case WeightType::q4_0:
    case WeightType::q5_0:
    case WeightType::q5_1: return XForm::q8_0;
    case WeightType::q4_k:
    case WeightType::q5_k:
    case WeightType::q6_k: return XForm::q8_k;
    default: return XForm::f32;
  }
}

// The tile of a type's dots, or null where the path has none.
linalg::TileFn tile_of(const linalg::DotKernels& k, WeightType t) {
  switch (t) {
    case WeightType::q8_0: return k.tile_q8_0;
    case WeightType::q4_0: return k.tile_q4_0;
    case WeightType::q4_k: return k.tile_q4_k;
    case WeightType::q5_k: return k.tile_q5_k;
    case WeightType::q6_k: return k.tile_q6_k;
    default: return nullptr;
  }
}

linalg::DotFn dot_of(const linalg::DotKernels& k, WeightType t) {
  switch (t) {
    case WeightType::q8_0: return k.q8_0;
    case WeightType::q4_0: return k.q4_0;
    case WeightType::q5_0: return k.q5_0;
    case WeightType::q5_1: return k.q5_1;
    case WeightType::q4_k: return k.q4_k;
    case WeightType::q5_k: return k.q5_k;
    case WeightType::q6_k: return k.q6_k;
    default: return nullptr;
  }
}

// Σ w x in eight float32 chains, added pairwise at the end (a float
// weight's row, dequantized, beside x as it is).
float dot_f32(const float* w, const float* x, int64_t K) {
  float s[8] = {};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int l = 0; l < 8; ++l) s[l] += w[k + l] * x[k + l];
  for (; k < K; ++k) s[k % 8] += w[k] * x[k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// x's rows in the formats the runs read: Q8_0 (34 bytes a block of 32),
// Q8_K (a BlockQ8K a block of 256). Kept by the calling thread and reused,
// so that a decode step allocates nothing.
struct XRows {
  std::vector<uint8_t> q8_0;
  std::vector<BlockQ8K> q8_k;
};

}  // namespace

void dequantize_rows(const Weight& w, int64_t r0, int64_t n, float* out) {
  if (r0 < 0 || n < 0 || r0 + n > w.rows)
    throw Error("dequantize_rows: rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) + ") of a weight of " +
                std::to_string(w.rows));
  const linalg::DotKernels& k = linalg::dot_kernels();
  linalg::DequantFn fast = nullptr;
  switch (w.type) {
    case WeightType::q8_0: fast = k.dequantize_q8_0; break;
    case WeightType::q4_0: fast = k.dequantize_q4_0; break;
    case WeightType::q4_k: fast = k.dequantize_q4_k; break;
    case WeightType::q5_k: fast = k.dequantize_q5_k; break;
    case WeightType::q6_k: fast = k.dequantize_q6_k; break;
    default: break;
  }
  if (!fast) fast = weight_type_info(w.type).dequantize;
  weight_bytes(w.type, w.cols);  // the check of cols
  const int64_t K = w.cols;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t r = 0; r < n; ++r) fast(w.row(r0 + r), out + r * K, K);
}

bool weight_matmul_tiles(WeightType type) { return tile_of(linalg::dot_kernels(), type) != nullptr; }

void weight_matmul(float* out, const float* x, int64_t M, int64_t K, std::span<const Weight> w,
                   const float* bias) {
  if (M < 0 || K < 0) throw Error("weight_matmul: negative size M = " + std::to_string(M) + ", K = " + std::to_string(K));
  bool need[3] = {};
  int64_t N = 0;
  for (const Weight& r : w) {
    if (r.cols != K)
      throw Error("weight_matmul: a " + std::string(weight_type_info(r.type).name) + " weight of " +
                  std::to_string(r.cols) + " columns beside activations of " + std::to_string(K));
    if (r.rows < 0) throw Error("weight_matmul: a weight of negative rows " + std::to_string(r.rows));
    weight_bytes(r.type, K);  // K a multiple of the block, else an error naming both
    need[static_cast<int>(form_of(r.type))] = true;
    N += r.rows;
  }
  if (M == 0 || N == 0) return;
  thread_local XRows xr;
  const auto uM = static_cast<size_t>(M), uK = static_cast<size_t>(K);
  const size_t q8_0_row = uK / 32 * 34, q8_k_row = uK / 256;
  if (need[static_cast<int>(XForm::q8_0)] && xr.q8_0.size() < uM * q8_0_row) xr.q8_0.resize(uM * q8_0_row);
  if (need[static_cast<int>(XForm::q8_k)] && xr.q8_k.size() < uM * q8_k_row) xr.q8_k.resize(uM * q8_k_row);
  uint8_t* xq8_0 = xr.q8_0.data();
  BlockQ8K* xq8_k = xr.q8_k.data();
  // Each run as the loop reads it: its rows' bytes and stride, its dot.
  struct Run {
    const uint8_t* data;
    uint64_t stride;
    WeightType type;
    XForm form;
    linalg::DotFn dot;
    linalg::TileFn tile;  // null: the dots a row of x at a time
    int64_t end;          // one past its last output
  };
  const linalg::DotKernels& kernels = linalg::dot_kernels();
  // The calling thread's, reused (a decode step makes dozens of calls);
  // the threads below read it through this reference.
  thread_local std::vector<Run> runs_of_caller;
  std::vector<Run>& runs = runs_of_caller;
  runs.clear();
  for (int64_t end = 0; const Weight& r : w) {
    end += r.rows;
    runs.push_back({static_cast<const uint8_t*>(r.data), r.row_bytes(), r.type, form_of(r.type), dot_of(kernels, r.type),
                    tile_of(kernels, r.type), end});
  }
  constexpr int64_t kTile = linalg::kDotRows;  // weight rows a thread takes at a time
#pragma omp parallel if (!omp_in_parallel())
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i) {
      if (need[static_cast<int>(XForm::q8_0)]) linalg::quantize_q8_0_x(x + i * K, xq8_0 + i * q8_0_row, K);
      if (need[static_cast<int>(XForm::q8_k)]) linalg::quantize_q8_k(x + i * K, xq8_k + i * q8_k_row, K);
    }
    thread_local std::vector<float> wrow;  // a float weight's rows, dequantized
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    // This thread's outputs: a contiguous range of whole tiles.
    const int64_t tiles = (N + kTile - 1) / kTile;
    const int64_t j0 = std::min(N, tiles * t / T * kTile), j1 = std::min(N, tiles * (t + 1) / T * kTile);
    size_t r = 0;
    for (int64_t jt = j0; jt < j1;) {
      // The tile: up to kTile rows of one run.
      while (runs[r].end <= jt) ++r;
      const Run& run = runs[r];
      const int64_t n = std::min({kTile, j1 - jt, run.end - jt});
      const uint8_t* rows = run.data + static_cast<uint64_t>(jt - (run.end - w[r].rows)) * run.stride;
      if (run.form == XForm::f32 && run.type != WeightType::f32) {  // dequantized into wrow
        if (wrow.size() < kTile * uK) wrow.resize(kTile * uK);
        for (int64_t u = 0; u < n; ++u) dequantize_row(run.type, rows + u * run.stride, wrow.data() + u * K, K);
      }
      int64_t i = 0;
      // A prompt's rows of x, kTileRowsX at a time, against a whole tile.
      if (run.tile && n == kTile)
        for (; i + linalg::kTileRowsX <= M; i += linalg::kTileRowsX)
          run.tile(rows, run.stride,
                   run.form == XForm::q8_0 ? xq8_0 + i * q8_0_row : reinterpret_cast<const uint8_t*>(xq8_k + i * q8_k_row),
                   run.form == XForm::q8_0 ? q8_0_row : q8_k_row * sizeof(BlockQ8K), K, out + i * N + jt, N);
      for (; i < M; ++i) {
        float* o = out + i * N + jt;
        switch (run.form) {
          case XForm::q8_0:
          case XForm::q8_k: {
            const void* xi = run.form == XForm::q8_0 ? static_cast<const void*>(xq8_0 + i * q8_0_row) : xq8_k + i * q8_k_row;
            // x's first row reads the tile from memory one row after another:
            // the thread's rows are then one stream of lines, which the
            // hardware prefetcher follows well (with the dots' prefetch
            // ahead). Reading four rows together makes four short streams it
            // follows poorly: 1.17-1.21x slower decode of TinyLlama's Q8_0
            // and Q4_0 files, even with the next tile prefetched by hand (AMD
            // EPYC Zen 3). The later rows of x find the tile in cache, where
            // four rows a call share x's loads and run four chains.
            const int64_t rows_a_dot = i == 0 ? 1 : kTile;
            for (int64_t u = 0; u < n; u += rows_a_dot)
              run.dot(rows + u * run.stride, run.stride, static_cast<int>(std::min(rows_a_dot, n - u)), xi, K, o + u);
            break;
          }
          case XForm::f32:
            for (int64_t u = 0; u < n; ++u) {
              const float* row = run.type == WeightType::f32 ? reinterpret_cast<const float*>(rows + u * run.stride)
                                                             : wrow.data() + u * K;
              o[u] = dot_f32(row, x + i * K, K);
            }
            break;
        }
      }
      if (bias)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t u = 0; u < n; ++u) out[m * N + jt + u] += bias[jt + u];
      jt += n;
    }
  }
}

}  // namespace qkv
