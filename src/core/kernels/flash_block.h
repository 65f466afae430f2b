// flash_block.h: the forward's unit of work, shared by its three drivers
// (prefill and the weights pass in flash_forward.cpp, decode in
// flash_decode.cpp): a block of query rows walking its visible keys tile by
// tile with the online softmax, and the per-thread workspace it runs in.
//
// A block covers up to kBR positions of one batch element and one key/value
// head g, for every query head of g's GQA group, so each K/V tile is loaded
// once for all the heads that read it. Its rows are cut into panels: one per
// head in prefill, or the whole group stacked into one panel in decode.
//
// Which micro-kernels run is decided per panel: float32 (flash_kernels.h);
// bf16 widened to float32 into scratch; AVX512-BF16 (flash_bf16.h), which
// reads bf16 K in place, packs Q and the weights in pairs and runs vdpbf16ps;
// or AMX tiles for the prefill's two products (flash_amx.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <omp.h>

#include "core/attention_problem.h"
#include "core/kernels/flash_amx.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_kernels.h"
#include "core/kernels/flash_tiles.h"
#include "core/runtime/scratch.h"
#include "qkv/tensor.h"

namespace qkv::kernels::fwd {

// q [B, Hq, N, D], k [B, Hkv, S, D] and v [B, Hkv, S, Dv] are read through
// p.q, p.k, p.v: a head's rows are ldk (ldv) floats apart, which the
// micro-kernels take as they are, so a strided input (a KV-cache slice)
// costs nothing extra. out [B, Hq, N, Dv] and lse [B, Hq, N] are C-ordered.
struct Ctx {
  const AttentionProblem& p;
  const FlashKernels& kern;
  bool needs_elementwise;  // mask, ALiBi or softcap touch every tile
  bool bf16;               // q, k, v are bfloat16
  // bf16 on a path with vdpbf16ps (avx512bf16, amx): Q·Kᵀ and P·V by these
  // kernels on bf16 pairs; null elsewhere (float32, or bf16 tiles widened).
  const FlashBf16Kernels* dp;
  // Prefill (and its weights pass) on AMX tiles: bf16, the amx path, head
  // sizes the tiles divide (amx_shape_ok), N past decode's rows; else null.
  const FlashAmxKernels* amx = nullptr;
  // Prefill with vdpbf16ps and several query blocks per head: V's pairs for
  // every head, packed once up front (pack_all_v_pairs), else null.
  const uint32_t* v_pairs = nullptr;
  // Prefill on AMX: every head's V transposed, [B * Hkv][Dv][vt_row_stride(S)]
  // (pack_all_vt).
  const uint16_t* v_cols = nullptr;
  // bf16 K and V tiles are widened to float32 into scratch unless vdpbf16ps
  // reads them: K in place, V in place (decode rows) or packed in pairs.
  bool widens() const { return bf16 && !dp; }
};

// The row stride of Ctx::v_cols (pack_all_vt): S rounded up to 32 keys, so
// rows start on cache lines.
inline int64_t vt_row_stride(int64_t S) { return (S + 31) / 32 * 32; }

// One thread's share of check_finite in decode: the sum of x - x over every
// raw score it computed (0, or NaN once one was not finite).
struct ScanState {
  alignas(64) float acc[16] = {};
};

// A block of work: positions [i0, i0+npos) of batch b against keys
// [kbeg, kend), for every query head of key/value head g.
struct Block {
  int64_t b, g, i0;
  int npos;
  int64_t kbeg, kend;
};

// The rows one pass of the micro-kernels handles: heads [h0, h0+nheads) x
// the block's positions, row r = (head h0 + r / npos, position i0 + r % npos).
// Prefill runs one panel per head; decode stacks a whole GQA group into one
// panel (group x N <= kBR rows), so each K and V row is loaded once for all
// the heads that read it.
struct Panel {
  int64_t h0;
  int nheads, npos;
  float* Qp;  // packed queries: Qt [D][kBR] or, for qk_rows, Q [rows][D];
              // for qk_bf16_avx512, Qt2 [bf16_pairs(D)][kBR] words (fits in Qt)
  float* O;   // [kBR][Dv]; on AMX tiles (uses_amx) transposed, Ot [Dv][kBR]
  float* m;   // [kBR]
  float* l;   // [kBR]
  int rows() const { return nheads * npos; }
};

// The thread's scratch cut into the block's panels, then St and alpha, then
// (bf16 inputs only) the widened K and V tiles.
struct Workspace {
  std::vector<Panel> panels;
  float* St;
  float* alpha;
  float* Kt = nullptr;        // [kBC][D]
  float* Vt = nullptr;        // [kBC][Dv]
  uint32_t* P2 = nullptr;     // [kBC/2][kBR] pairs of weights (pack_p_bf16_avx512)
  uint32_t* V2 = nullptr;     // [kBC/2][Dv] pairs of V rows (pack_v_bf16_avx512)
  uint16_t* kpad = nullptr;   // [16][D] a last partial group of K rows (qk_bf16_amx)
  uint16_t* vpad = nullptr;   // [Dv][32] a last partial chunk of keys (pv_bf16_amx)
  ScanState* scan = nullptr;  // decode with check_finite fused: this thread's
};

// The team's workspaces, sized before the parallel region (nothing inside
// it allocates): ws[t] is OpenMP thread t's, over its slice of `scratch`.
struct TeamWorkspaces {
  TeamScratch scratch;
  std::vector<Workspace> ws;
  std::vector<ScanState> scans;
  TeamWorkspaces(const AttentionProblem& p, int threads);
  Workspace& mine() { return ws[omp_get_thread_num()]; }
};

// Cuts `base` (a thread's scratch slot) into the panels of `blk` and the
// tiles, in ws.
void make_workspace(const AttentionProblem& p, const Block& blk, float* base, Workspace& ws);

// Whether this panel's scores come from qk_bf16_avx512 (prefill panels) or
// from qk_rows_bf16_avx512 (decode's few rows); either reads K in place.
inline bool uses_dp_bf16(const Ctx& c, const Panel& pn) {
  return c.dp && pn.rows() > kRowsForQkRows;
}
inline bool uses_rows_bf16(const Ctx& c, const Panel& pn) {
  return c.dp && pn.rows() <= kRowsForQkRows;
}
// Whether a prefill panel runs on AMX tiles: its scores from qk_bf16_amx
// (the Qt2 of qk_bf16_avx512), its P·V by pv_bf16_amx into a transposed O.
inline bool uses_amx(const Ctx& c, const Panel& pn) { return c.amx && uses_dp_bf16(c, pn); }

// The tile configuration of the calling thread while AMX kernels run (amx
// not null).
struct AmxTiles {
  const FlashAmxKernels* amx;
  explicit AmxTiles(const FlashAmxKernels* use) : amx(use) {
    if (amx) amx->tiles_on();
  }
  ~AmxTiles() {
    if (amx) amx->tiles_off();
  }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};

// The K and V rows of a tile [nj] as the float32 kernels read them: in place
// (float32), or widened into the workspace (bf16).
struct TileKV {
  const float* K = nullptr;  // [nj][D], rows ldk apart
  int64_t ldk = 0;
  const float* V = nullptr;  // [nj][Dv], rows ldv apart
  int64_t ldv = 0;
};

TileKV load_tile(const Ctx& c, const Block& blk, Workspace& ws, int64_t j0, int64_t nj,
                 bool need_k, bool need_v);

// Flat row index (b, h, i) in [B, Hq, N] of panel row r.
inline int64_t out_row(const AttentionProblem& p, const Block& blk, const Panel& pn, int r) {
  return (blk.b * p.Hq + pn.h0 + r / pn.npos) * p.N + blk.i0 + r % pn.npos;
}

// The keys [first, end) any row of the block may see (first_key and
// last_key both rise with the position), clipped to the block's range.
inline void visible_range(const Ctx& c, const Block& blk, int64_t& first, int64_t& end) {
  visible_keys(c.p, blk.b, blk.i0, blk.npos, blk.kbeg, blk.kend, first, end);
}

// The panel's queries packed for its Q·Kᵀ kernel (Panel::Qp).
void pack_queries(const Ctx& c, const Block& blk, Panel& pn);

// The scaled, masked score tile ws.St of the panel for keys [j0, j0+nj).
// With ws.scan (decode under check_finite), the raw scores are checked before
// any mask touches them.
void score_tile(const Ctx& c, const Block& blk, const Panel& pn, const TileKV& kv, int64_t j0,
                int64_t nj, const Workspace& ws);

// Online softmax of every panel of the block over its key range; leaves the
// unnormalised (m, l, O) in the panels.
void run_block(const Ctx& c, const Block& blk, Workspace& ws);

// The forward's output [B, Hq, N, Dv], written once per element: float32,
// or bf16 rounded from the float32 value (to nearest even), straight into
// the caller's tensor. A float32 copy rounded afterwards was a buffer per
// call as large as a float32 out; from 32 MiB glibc maps such a buffer
// afresh every time, and first touches cost the bf16 call at H = 32, N = S
// = 2048, D = 128 7% (229 -> 213 ms, medians of 9 alternating rounds).
struct OutRows {
  float* f32 = nullptr;
  bfloat16* b16 = nullptr;  // set instead of f32 when out is bf16
  void put(int64_t x, float v) const {
    if (b16)
      b16[x] = bf16_from_float(v);
    else
      f32[x] = v;
  }
  float get(int64_t x) const { return b16 ? bf16_to_float(b16[x]) : f32[x]; }
};

// Split-KV decode (flash_decode.cpp): out and, when not null, lse [B, Hq, N]
// for N <= kDecodeRows.
void decode(const Ctx& c, const OutRows& out, float* lse, int threads);

}  // namespace qkv::kernels::fwd
