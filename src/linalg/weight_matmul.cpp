// weight_matmul (qkv/weight.h): out = x · Wᵀ + bias over runs of weights of
// any type. Each call quantizes x's rows once into the formats its runs
// need, then the threads share the outputs: each weight row's bytes are
// read from memory once per call. A prompt of 16 rows or more takes the
// runs that have panels (linalg/quant_panel.h) 16 weight rows at a time,
// repacked once into L2 for every row of x; the other runs, and shorter
// calls, go four weight rows at a time, each row's dots with every row of
// x (four by four where the path has tiles) while it sits in L1.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "linalg/quant_dot.h"
#include "linalg/quant_panel.h"
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

// The panels of a type's products, or null where the path has none.
const linalg::PanelKernels* panel_of(const linalg::DotKernels& k, WeightType t) {
  switch (t) {
    case WeightType::q8_0: return k.panel_q8_0;
    case WeightType::q4_0: return k.panel_q4_0;
    case WeightType::q4_k: return k.panel_q4_k;
    case WeightType::q5_k: return k.panel_q5_k;
    case WeightType::q6_k: return k.panel_q6_k;
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
  std::vector<float> q8_0_scale, q8_k_sums32;  // the panels' sums (linalg/quant_panel.h)
  std::vector<int32_t> q8_0_sums, q8_k_sums;
};

// The rows of x from which a call packs panels of the weights that have
// them (linalg/quant_panel.h): packing costs about a product with four
// rows; at 12-14 rows panels and tiles took the same time, at 16 panels
// 1.3-1.6x less, at 64 2x less (TinyLlama-shaped 2048 x 5632 matrices of
// Q8_0, Q4_0, Q4_K, Q6_K; AMD EPYC Zen 4, 2 threads).
constexpr int64_t kPanelMinRows = 16;

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

bool weight_matmul_tiles(WeightType type) { return panel_of(linalg::dot_kernels(), type) != nullptr; }

namespace {

// Each run as the threads read it: its rows' bytes and stride, its kernels.
struct Run {
  const uint8_t* data;
  uint64_t stride;
  int64_t rows;
  WeightType type;
  XForm form;
  linalg::DotFn dot;
  linalg::TileFn tile;                // null: the dots a row of x at a time
  const linalg::PanelKernels* panel;  // null: the tiles or dots, as above
  int64_t end;                        // one past its last output
};

// One call's operands, as every thread reads them.
struct Call {
  float* out;
  const float* x;
  int64_t M, K, N;
  const float* bias;
  const std::vector<Run>& runs;
  // x's rows as Q8_0 blocks and as BlockQ8K, with the panels' sums.
  linalg::PanelX px8_0, px8_k;
  int64_t panel_count, panel_bytes;
};

void add_bias(const Call& c, int64_t j, int64_t n) {
  if (c.bias)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t u = 0; u < n; ++u) c.out[m * c.N + j + u] += c.bias[j + u];
}

// Thread t of T's share of the runs that go by panels (linalg/quant_panel.h):
// a contiguous range of panels, each packed once into the thread's buffer
// and run against every row of x while it sits in L2.
void panel_share(const Call& c, int t, int T) {
  thread_local std::vector<uint8_t> buffer;  // allocated once, reused by every call
  if (buffer.size() < static_cast<size_t>(c.panel_bytes) + 64) buffer.resize(static_cast<size_t>(c.panel_bytes) + 64);
  uint8_t* panel = buffer.data() + (-reinterpret_cast<uintptr_t>(buffer.data()) & 63);  // 64-byte aligned
  const int64_t p0 = c.panel_count * t / T, p1 = c.panel_count * (t + 1) / T;
  int64_t p = 0;
  for (const Run& run : c.runs) {
    if (!run.panel) continue;
    const int64_t j0 = run.end - run.rows;
    for (int64_t u = 0; u < run.rows; u += linalg::kPanelCols, ++p) {
      if (p < p0 || p >= p1) continue;
      const int n = static_cast<int>(std::min<int64_t>(linalg::kPanelCols, run.rows - u));
      run.panel->pack(run.data + static_cast<uint64_t>(u) * run.stride, run.stride, n, c.K, panel);
      const linalg::PanelX& px = run.form == XForm::q8_0 ? c.px8_0 : c.px8_k;
      for (int64_t i = 0; i < c.M; i += linalg::kPanelRowsX)
        run.panel->dot(panel, px, i, static_cast<int>(std::min<int64_t>(linalg::kPanelRowsX, c.M - i)), c.K,
                       c.out + i * c.N + j0 + u, c.N, n);
      add_bias(c, j0 + u, n);
    }
  }
}

// Thread t of T's share of the other runs: a contiguous range of whole
// tiles of kDotRows weight rows (outputs of runs that go by panels skipped).
void tile_share(const Call& c, int t, int T) {
  constexpr int64_t kTile = linalg::kDotRows;
  const int64_t M = c.M, K = c.K, N = c.N;
  thread_local std::vector<float> wrow;  // a float weight's rows, dequantized
  const int64_t tiles = (N + kTile - 1) / kTile;
  const int64_t j0 = std::min(N, tiles * t / T * kTile), j1 = std::min(N, tiles * (t + 1) / T * kTile);
  size_t r = 0;
  for (int64_t jt = j0; jt < j1;) {
    // The tile: up to kTile rows of one run.
    while (c.runs[r].end <= jt) ++r;
    const Run& run = c.runs[r];
    if (run.panel) {
      jt = std::min(j1, run.end);
      continue;
    }
    const int64_t n = std::min({kTile, j1 - jt, run.end - jt});
    const uint8_t* rows = run.data + static_cast<uint64_t>(jt - (run.end - run.rows)) * run.stride;
    if (run.form == XForm::f32 && run.type != WeightType::f32) {  // dequantized into wrow
      if (wrow.size() < static_cast<size_t>(kTile * K)) wrow.resize(static_cast<size_t>(kTile * K));
      for (int64_t u = 0; u < n; ++u) dequantize_row(run.type, rows + u * run.stride, wrow.data() + u * K, K);
    }
    int64_t i = 0;
    // A prompt's rows of x, kTileRowsX at a time, against a whole tile.
    const linalg::PanelX& xq = run.form == XForm::q8_0 ? c.px8_0 : c.px8_k;  // for the quantized forms
    if (run.tile && n == kTile)
      for (; i + linalg::kTileRowsX <= M; i += linalg::kTileRowsX)
        run.tile(rows, run.stride, xq.blocks + i * xq.stride, xq.stride, K, c.out + i * N + jt, N);
    for (; i < M; ++i) {
      float* o = c.out + i * N + jt;
      switch (run.form) {
        case XForm::q8_0:
        case XForm::q8_k: {
          const uint8_t* xi = xq.blocks + i * xq.stride;
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
            const float* row =
                run.type == WeightType::f32 ? reinterpret_cast<const float*>(rows + u * run.stride) : wrow.data() + u * K;
            o[u] = dot_f32(row, c.x + i * K, K);
          }
          break;
      }
    }
    add_bias(c, jt, n);
    jt += n;
  }
}

}  // namespace

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
  const linalg::DotKernels& kernels = linalg::dot_kernels();
  // The calling thread's, reused (a decode step makes dozens of calls);
  // the threads below read them through the Call.
  thread_local std::vector<Run> runs;
  thread_local XRows xr;
  runs.clear();
  bool panels = false;
  int64_t panel_count = 0, panel_bytes = 0;
  for (int64_t end = 0; const Weight& r : w) {
    end += r.rows;
    const linalg::PanelKernels* panel = M >= kPanelMinRows ? panel_of(kernels, r.type) : nullptr;
    if (panel) {
      panels = true;
      panel_count += (r.rows + linalg::kPanelCols - 1) / linalg::kPanelCols;
      panel_bytes = std::max(panel_bytes, panel->bytes(K));
    }
    runs.push_back({static_cast<const uint8_t*>(r.data), r.row_bytes(), r.rows, r.type, form_of(r.type),
                    dot_of(kernels, r.type), tile_of(kernels, r.type), panel, end});
  }
  const bool q8_0 = need[static_cast<int>(XForm::q8_0)], q8_k = need[static_cast<int>(XForm::q8_k)];
  const auto uM = static_cast<size_t>(M), uK = static_cast<size_t>(K);
  const size_t q8_0_row = uK / 32 * 34, q8_k_row = uK / 256;
  auto fit = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  if (q8_0) fit(xr.q8_0, uM * q8_0_row);
  if (q8_k) fit(xr.q8_k, uM * q8_k_row);
  if (panels && q8_0) {
    fit(xr.q8_0_scale, uM * uK / 32);
    fit(xr.q8_0_sums, uM * uK / 32);
  }
  if (panels && q8_k) {
    fit(xr.q8_k_sums, uM * uK / 16);
    fit(xr.q8_k_sums32, uM * uK / 32);
  }
  // The caller's thread_local rows, by pointer: each thread has its own xr.
  uint8_t* xq8_0 = xr.q8_0.data();
  BlockQ8K* xq8_k = xr.q8_k.data();
  float *x_scale = xr.q8_0_scale.data(), *x_sums32 = xr.q8_k_sums32.data();
  int32_t *x_sums8_0 = xr.q8_0_sums.data(), *x_sums8_k = xr.q8_k_sums.data();
  const Call c{out,
               x,
               M,
               K,
               N,
               bias,
               runs,
               {xq8_0, q8_0_row, x_scale, x_sums8_0, nullptr},
               {reinterpret_cast<const uint8_t*>(xq8_k), q8_k_row * sizeof(BlockQ8K), nullptr, x_sums8_k, x_sums32},
               panel_count,
               panel_bytes};
#pragma omp parallel if (!omp_in_parallel())
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i) {
      if (q8_0) {
        kernels.quantize_x8_0(x + i * K, xq8_0 + i * q8_0_row, K);
        if (panels) linalg::panel_sums_q8_0(xq8_0 + i * q8_0_row, K, x_scale + i * (K / 32), x_sums8_0 + i * (K / 32));
      }
      if (q8_k) {
        kernels.quantize_x8_k(x + i * K, xq8_k + i * q8_k_row, K);
        if (panels) linalg::panel_sums_q8_k(xq8_k + i * q8_k_row, K, x_sums8_k + i * (K / 16), x_sums32 + i * (K / 32));
      }
    }
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    if (panels) panel_share(c, t, T);
    tile_share(c, t, T);
  }
}

}  // namespace qkv
