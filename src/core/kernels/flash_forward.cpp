// flash_forward.cpp: the tiled, threaded algorithm around the micro-kernels.
//
// Work is split into blocks of up to kBR query rows of one batch element and
// one key/value head g, covering all query heads of g's GQA group, so each
// K/V tile is loaded once and used by every head that reads it. A block walks
// its visible keys in tiles of kBC with the online softmax (running max m,
// running sum l, accumulator O rescaled by alpha), so no N x S matrix exists.
//
// Decode (N <= kDecodeRows) has too few rows to keep two cores busy, so S is
// cut into chunks of kSplitKeys; each chunk yields a partial (m, l, O) and the
// partials merge by their log-sum-exp. The chunk size is a constant, not a
// function of the thread count, which keeps results bitwise reproducible.
//
// bfloat16 inputs: each K and V tile is read in place as bf16 and widened to
// float32 once per block (shared by the group's panels) into the thread's
// scratch, then the float32 micro-kernels run on it; Q is widened when
// packed: bitwise the float32 kernel on the widened inputs. With AVX512-BF16
// nothing is widened into scratch: Q is packed in bf16 (pairs for prefill,
// rows for decode) and vdpbf16ps reads K in place; P·V rounds the weights to
// bf16 (as PyTorch's and FlashAttention's bf16 kernels do) and runs vdpbf16ps
// on pairs of keys: prefill packs V's pairs once per head up front (per
// tile when a head has a single query block, or when a tile's visible keys
// do not start or end on those pairs), decode's few rows interleave two V
// rows in registers (each V byte is read once from memory there). With AMX
// (flash_amx.h) the prefill's two products run on tiles instead: the same
// packed queries and weight pairs, each head's V transposed once up front,
// and the output accumulated transposed.
#include "core/kernels/flash_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include <omp.h>

#include "core/kernels/flash_amx.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_kernels.h"
#include "core/kernels/flash_tiles.h"
#include "core/runtime/scratch.h"

namespace qkv::kernels {
namespace {

constexpr int64_t kSplitKeys = 512;

// q [B, Hq, N, D], k [B, Hkv, S, D] and v [B, Hkv, S, Dv] are read through
// p.q, p.k, p.v: a head's rows are ldk (ldv) floats apart, which the
// micro-kernels take as they are, so a strided input (a KV-cache slice)
// costs nothing extra. out [B, Hq, N, Dv] and lse [B, Hq, N] are C-ordered.
struct Ctx {
  const AttentionProblem& p;
  const FlashKernels& kern;
  bool needs_elementwise;  // mask, ALiBi or softcap touch every tile
  bool bf16;               // q, k, v are bfloat16
  bool dp_bf16;            // bf16 on Isa::avx512bf16 or amx: Q·Kᵀ and P·V by vdpbf16ps
  // Prefill (and its weights pass) on AMX tiles: bf16, Isa::amx, head sizes
  // the tiles divide (amx_shape_ok), N past decode's rows.
  bool amx = false;
  // Prefill with vdpbf16ps and several query blocks per head: V's pairs for
  // every head, packed once up front (pack_all_v_pairs), else null.
  const uint32_t* v_pairs = nullptr;
  // Prefill on AMX: every head's V transposed, [B * Hkv][Dv][vt_row_stride(S)]
  // (pack_all_vt).
  const uint16_t* v_cols = nullptr;
  // bf16 K and V tiles are widened to float32 into scratch unless vdpbf16ps
  // reads them: K in place, V in place (decode rows) or packed in pairs.
  bool widens() const { return bf16 && !dp_bf16; }
};

// The row stride of Ctx::v_cols (pack_all_vt): S rounded up to 32 keys, so
// rows start on cache lines.
int64_t vt_row_stride(int64_t S) { return (S + 31) / 32 * 32; }

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

size_t panel_floats(const AttentionProblem& p) {
  return static_cast<size_t>(p.D * kBR + kBR * p.Dv + 2 * kBR);
}

bool stacks_group(const AttentionProblem& p, const Block& blk) {
  return blk.npos == p.N && p.N <= kDecodeRows && p.group * p.N <= kBR;
}

// The thread's scratch cut into the block's panels, then St and alpha, then
// (bf16 inputs only) the widened K and V tiles.
struct Workspace {
  std::vector<Panel> panels;
  float* St;
  float* alpha;
  float* Kt = nullptr;     // [kBC][D]
  float* Vt = nullptr;     // [kBC][Dv]
  uint32_t* P2 = nullptr;  // [kBC/2][kBR] pairs of weights (pack_p_bf16_avx512)
  uint32_t* V2 = nullptr;  // [kBC/2][Dv] pairs of V rows (pack_v_bf16_avx512)
  uint16_t* kpad = nullptr;  // [16][D] a last partial group of K rows (qk_bf16_amx)
  uint16_t* vpad = nullptr;  // [Dv][32] a last partial chunk of keys (pv_bf16_amx)
  ScanState* scan = nullptr;  // decode with check_finite fused: this thread's
};

// Floats of one thread's workspace for the largest block: a panel per head
// of the group (or one stacked panel), St and alpha, and for bf16 inputs a
// float32 K and V tile, the bf16 pairs of a P and a V tile, and AMX's
// padded K rows and V keys.
size_t workspace_floats(const AttentionProblem& p) {
  const size_t tiles = p.dtype == DType::bf16
                           ? static_cast<size_t>(kBC * (p.D + p.Dv) + kBC / 2 * (kBR + p.Dv) +
                                                 8 * p.D + 16 * p.Dv)
                           : 0;
  return panel_floats(p) * static_cast<size_t>(p.group) + kBC * kBR + kBR + tiles;
}

// The team's workspaces, sized before the parallel region (nothing inside
// it allocates): ws[t] is OpenMP thread t's, over its slice of `scratch`.
struct TeamWorkspaces {
  TeamScratch scratch;
  std::vector<Workspace> ws;
  std::vector<ScanState> scans;
  TeamWorkspaces(const AttentionProblem& p, int threads)
      : scratch(threads, workspace_floats(p)), ws(threads), scans(threads) {
    for (Workspace& w : ws) w.panels.reserve(p.group);
  }
  Workspace& mine() { return ws[omp_get_thread_num()]; }
};

void make_workspace(const AttentionProblem& p, const Block& blk, float* base, Workspace& ws) {
  const bool stacked = stacks_group(p, blk);
  const int64_t n = stacked ? 1 : p.group;
  const size_t per = panel_floats(p);
  ws.panels.clear();
  for (int64_t t = 0; t < n; ++t) {
    Panel pn;
    pn.h0 = blk.g * p.group + (stacked ? 0 : t);
    pn.nheads = stacked ? static_cast<int>(p.group) : 1;
    pn.npos = blk.npos;
    pn.Qp = base + t * per;
    pn.O = pn.Qp + p.D * kBR;
    pn.m = pn.O + kBR * p.Dv;
    pn.l = pn.m + kBR;
    ws.panels.push_back(pn);
  }
  ws.St = base + per * n;
  ws.alpha = ws.St + kBC * kBR;
  if (p.dtype == DType::bf16) {
    ws.Kt = ws.alpha + kBR;
    ws.Vt = ws.Kt + kBC * p.D;
    ws.P2 = reinterpret_cast<uint32_t*>(ws.Vt + kBC * p.Dv);
    ws.V2 = ws.P2 + kBC / 2 * kBR;
    ws.kpad = reinterpret_cast<uint16_t*>(ws.V2 + kBC / 2 * p.Dv);
    ws.vpad = ws.kpad + 16 * p.D;
  }
}

// Whether this panel's scores come from qk_bf16_avx512 (prefill panels) or
// from qk_rows_bf16_avx512 (decode's few rows); either reads K in place.
bool uses_dp_bf16(const Ctx& c, const Panel& pn) {
  return c.dp_bf16 && pn.rows() > kRowsForQkRows;
}
bool uses_rows_bf16(const Ctx& c, const Panel& pn) {
  return c.dp_bf16 && pn.rows() <= kRowsForQkRows;
}
// Whether a prefill panel runs on AMX tiles: its scores from qk_bf16_amx
// (the Qt2 of qk_bf16_avx512), its P·V by pv_bf16_amx into a transposed O.
bool uses_amx(const Ctx& c, const Panel& pn) { return c.amx && uses_dp_bf16(c, pn); }

// The tile configuration of the calling thread while AMX kernels run.
struct AmxTiles {
  bool on;
  explicit AmxTiles(bool use) : on(use) {
    if (on) amx_tiles_on();
  }
  ~AmxTiles() {
    if (on) amx_tiles_off();
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
                 bool need_k, bool need_v) {
  const AttentionProblem& p = c.p;
  const int64_t bg = blk.b * p.Hkv + blk.g;
  if (!c.bf16)
    return {p.k.row<float>(bg, j0), p.k.row_stride, p.v.row<float>(bg, j0), p.v.row_stride};
  TileKV t{ws.Kt, p.D, ws.Vt, p.Dv};
  if (need_k) c.kern.widen_bf16(ws.Kt, p.D, p.k.row<uint16_t>(bg, j0), p.k.row_stride, nj, p.D);
  if (need_v) c.kern.widen_bf16(ws.Vt, p.Dv, p.v.row<uint16_t>(bg, j0), p.v.row_stride, nj, p.Dv);
  return t;
}

// Flat row index (b, h, i) in [B, Hq, N] of panel row r.
int64_t out_row(const AttentionProblem& p, const Block& blk, const Panel& pn, int r) {
  return (blk.b * p.Hq + pn.h0 + r / pn.npos) * p.N + blk.i0 + r % pn.npos;
}

// Qt[d][r] = q_r[d] * scale, zero for padding columns (so qk's padding lanes
// compute 0, never garbage); or Q [rows][D] scaled, for qk_rows.
// bf16 queries (widened exactly) scale the same way.
//
// For qk_bf16_avx512: Qt2[t][r] = the word (q_r[2t], q_r[2t+1]) unscaled,
// zero past D and for padding columns. For qk_rows_bf16_avx512: rows of bf16
// [rows][bf16_row_pad(D)], unscaled, zero past D.
void pack_queries(const Ctx& c, const Block& blk, Panel& pn) {
  const AttentionProblem& p = c.p;
  const int rows = pn.rows();
  auto qrow = [&](int r) { return p.q.row<float>(blk.b * p.Hq + pn.h0 + r / pn.npos, blk.i0 + r % pn.npos); };
  auto qrow16 = [&](int r) { return p.q.row<uint16_t>(blk.b * p.Hq + pn.h0 + r / pn.npos, blk.i0 + r % pn.npos); };
  if (uses_rows_bf16(c, pn)) {
    uint16_t* Q = reinterpret_cast<uint16_t*>(pn.Qp);
    const int64_t ld = bf16_row_pad(p.D);
    for (int r = 0; r < rows; ++r) {
      const uint16_t* q = qrow16(r);
      for (int64_t d = 0; d < ld; ++d) Q[r * ld + d] = d < p.D ? q[d] : 0;
    }
    return;
  }
  if (uses_dp_bf16(c, pn)) {
    uint32_t* Qt2 = reinterpret_cast<uint32_t*>(pn.Qp);
    const int64_t whole = p.D / 2;  // pairs read as one word (little-endian: q[2t] low)
    for (int r = 0; r < kBR; ++r) {
      if (r >= rows) {
        for (int64_t t = 0; t < bf16_pairs(p.D); ++t) Qt2[t * kBR + r] = 0;
        continue;
      }
      const uint16_t* q = qrow16(r);
      for (int64_t t = 0; t < whole; ++t)
        std::memcpy(&Qt2[t * kBR + r], q + 2 * t, sizeof(uint32_t));
      if (p.D % 2) Qt2[whole * kBR + r] = q[p.D - 1];
    }
    return;
  }
  const float scale = static_cast<float>(p.scale);
  for (int r = 0; r < rows; ++r) {
    float* dst = rows <= kRowsForQkRows ? pn.Qp + r * p.D : pn.Qp + r;
    const int64_t step = rows <= kRowsForQkRows ? 1 : kBR;
    if (c.bf16) {
      const uint16_t* q = qrow16(r);
      for (int64_t d = 0; d < p.D; ++d) dst[d * step] = bf16_to_float(bfloat16{q[d]}) * scale;
    } else {
      const float* q = qrow(r);
      for (int64_t d = 0; d < p.D; ++d) dst[d * step] = q[d] * scale;
    }
  }
  if (rows > kRowsForQkRows)
    for (int64_t d = 0; d < p.D; ++d)
      for (int r = rows; r < kBR; ++r) pn.Qp[d * kBR + r] = 0.0f;
}

// The scaled, masked score tile ws.St of the panel for keys [j0, j0+nj).
// With ws.scan (decode under check_finite), the raw scores are checked before
// any mask touches them.
void score_tile(const Ctx& c, const Block& blk, const Panel& pn, const TileKV& kv, int64_t j0,
                int64_t nj, const Workspace& ws) {
  const AttentionProblem& p = c.p;
  float* St = ws.St;
  if (uses_amx(c, pn))
    qk_bf16_amx(St, p.k.row<uint16_t>(blk.b * p.Hkv + blk.g, j0), p.k.row_stride, nj,
                reinterpret_cast<const uint32_t*>(pn.Qp), p.D, pn.rows(),
                static_cast<float>(p.scale), ws.kpad);
  else if (uses_dp_bf16(c, pn))  // K [nj, D] bf16 in place, rows ldk apart
    qk_bf16_avx512(St, p.k.row<uint16_t>(blk.b * p.Hkv + blk.g, j0), p.k.row_stride, nj,
                   reinterpret_cast<const uint32_t*>(pn.Qp), p.D, pn.rows(),
                   static_cast<float>(p.scale));
  else if (uses_rows_bf16(c, pn))
    qk_rows_bf16_avx512(St, p.k.row<uint16_t>(blk.b * p.Hkv + blk.g, j0), p.k.row_stride, nj,
                        reinterpret_cast<const uint16_t*>(pn.Qp), p.D, pn.rows(),
                        static_cast<float>(p.scale));
  else if (pn.rows() <= kRowsForQkRows)
    c.kern.qk_rows(St, kv.K, kv.ldk, nj, pn.Qp, p.D, pn.rows());
  else
    c.kern.qk(St, kv.K, kv.ldk, nj, pn.Qp, p.D, pn.rows());
  if (ws.scan) c.kern.check_scores(St, nj, pn.rows(), ws.scan->acc);
  // Interior tiles of an unmasked problem need no per-element work: every
  // row sees every key of the tile.
  if (!tile_is_interior(p, c.needs_elementwise, blk.b, blk.i0, blk.npos, j0, nj))
    mask_tile(p, TileRows{blk.b, pn.h0, blk.i0, pn.npos, pn.rows()}, j0, nj, St);
}

// The keys [first, end) any row of the block may see (first_key and
// last_key both rise with the position), clipped to the block's range.
void visible_range(const Ctx& c, const Block& blk, int64_t& first, int64_t& end) {
  visible_keys(c.p, blk.b, blk.i0, blk.npos, blk.kbeg, blk.kend, first, end);
}

// Online softmax of every panel of the block over its key range; leaves the
// unnormalised (m, l, O) in the panels.
void run_block(const Ctx& c, const Block& blk, Workspace& ws) {
  const AttentionProblem& p = c.p;
  for (Panel& pn : ws.panels) {
    pack_queries(c, blk, pn);
    for (int r = 0; r < kBR; ++r) pn.m[r] = -INFINITY, pn.l[r] = 0.0f;
    // A transposed Ot is read whole by the tiles: padding columns included
    // (stale scratch could hold Inf, and alpha = 0 times Inf is NaN).
    const int64_t used = uses_amx(c, pn) ? kBR * p.Dv : pn.rows() * p.Dv;
    for (int64_t x = 0; x < used; ++x) pn.O[x] = 0.0f;
  }
  int64_t first, end;
  visible_range(c, blk, first, end);
  const AmxTiles tiles(c.amx);
  // Decode reads each K and V row once, straight from memory. The micro-
  // kernels prefetch rows ahead within a stream, but the first V rows of a
  // tile would still be cold when P·V starts: ask for the whole V tile
  // before Q·Kᵀ, which then hides its latency (float32 V, or bf16 V read in
  // place; with the bf16 kernels' arithmetic cut this session, this took bf16
  // decode at S = 32768 from 5.6 to 5.1-5.3 ms, three runs of 8-14
  // alternating rounds). A widened bf16 tile is already in cache.
  const bool decode = blk.npos <= kDecodeRows;
  const int64_t bg = blk.b * p.Hkv + blk.g;
  for (int64_t j0 = first; j0 < end; j0 += kBC) {
    const int64_t nj = std::min<int64_t>(kBC, end - j0);
    const TileKV kv = load_tile(c, blk, ws, j0, nj, c.widens(), c.widens());
    if (decode && !c.bf16)  // 16 floats to a cache line
      for (int64_t j = 0; j < nj; ++j)
        for (int64_t x = 0; x < p.Dv; x += 16) __builtin_prefetch(kv.V + j * kv.ldv + x, 0, 2);
    if (decode && c.dp_bf16) {  // 32 bf16 to a cache line
      const uint16_t* v16 = p.v.row<uint16_t>(bg, j0);
      for (int64_t j = 0; j < nj; ++j)
        for (int64_t x = 0; x < p.Dv; x += 32) __builtin_prefetch(v16 + j * p.v.row_stride + x, 0, 2);
    }
    // This tile's V pairs: from the packed heads when they are its pairs
    // exactly (its first key starts a pair there, and an odd last key is S's
    // last, with a zero high half: a key past the visible end may hold
    // anything, and a weight of 0 times NaN is NaN), else packed into V2
    // once, by the first panel needing it.
    const bool packed = c.v_pairs && j0 % 2 == 0 && (nj % 2 == 0 || j0 + nj == p.S);
    const uint32_t* v2 = packed ? c.v_pairs + (bg * bf16_pairs(p.S) + j0 / 2) * p.Dv : nullptr;
    for (Panel& pn : ws.panels) {
      score_tile(c, blk, pn, kv, j0, nj, ws);
      if (uses_dp_bf16(c, pn)) {
        softmax_pairs_bf16_avx512(ws.P2, ws.St, nj, pn.rows(), pn.m, pn.l, ws.alpha);
        if (uses_amx(c, pn)) {
          const int64_t ldt = vt_row_stride(p.S);
          pv_bf16_amx(pn.O, ws.P2, nj, pn.rows(), c.v_cols + bg * p.Dv * ldt + j0, ldt, p.Dv,
                      ws.alpha, ws.vpad);
          continue;
        }
        if (!v2) {
          pack_v_bf16_avx512(ws.V2, p.v.row<uint16_t>(bg, j0), p.v.row_stride, nj, p.Dv);
          v2 = ws.V2;
        }
        pv_bf16_avx512(pn.O, ws.P2, nj, pn.rows(), v2, p.Dv, ws.alpha);
        continue;
      }
      c.kern.softmax(ws.St, nj, pn.rows(), pn.m, pn.l, ws.alpha);
      if (uses_rows_bf16(c, pn)) {
        pack_p_bf16_avx512(ws.P2, ws.St, nj, pn.rows());
        pv_rows_bf16_avx512(pn.O, ws.P2, nj, pn.rows(), p.v.row<uint16_t>(bg, j0),
                            p.v.row_stride, p.Dv, ws.alpha);
      } else {
        c.kern.pv(pn.O, ws.St, nj, pn.rows(), kv.V, kv.ldv, p.Dv, ws.alpha);
      }
    }
  }
}

// out = O / l and lse = m + log l for the block's rows; 0 and -inf for a row
// that saw no key.
void finalize(const Ctx& c, const Block& blk, const Workspace& ws, float* out, float* lse) {
  const AttentionProblem& p = c.p;
  for (const Panel& pn : ws.panels)
    for (int r = 0; r < pn.rows(); ++r) {
      const int64_t row = out_row(p, blk, pn, r);
      const float l = pn.l[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      if (uses_amx(c, pn))  // Ot [Dv][kBR]
        for (int64_t e = 0; e < p.Dv; ++e) out[row * p.Dv + e] = pn.O[e * kBR + r] * inv;
      else
        for (int64_t e = 0; e < p.Dv; ++e) out[row * p.Dv + e] = pn.O[r * p.Dv + e] * inv;
      if (lse) lse[row] = l > 0.0f ? pn.m[r] + std::log(l) : -INFINITY;
    }
}

// Query tiles of every (batch, key/value head), last tiles first: under a
// causal mask they see the most keys, so scheduling them early balances
// the threads. `body` runs once per block on some thread.
template <class Body>
void for_each_query_block(const AttentionProblem& p, int threads, Body body) {
  const int64_t n_qt = (p.N + kBR - 1) / kBR;
  const int64_t items = p.B * p.Hkv * n_qt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t qt = n_qt - 1 - it % n_qt, bg = it / n_qt;
    Block blk{bg / p.Hkv, bg % p.Hkv, qt * kBR, 0, 0, p.S};
    blk.npos = static_cast<int>(std::min<int64_t>(kBR, p.N - blk.i0));
    body(blk);
  }
}

// pack(bg, j0, nj) for every (batch, key/value head) bg and every tile of
// kBC keys [j0, j0 + nj) of its V, split between the threads.
template <class Pack>
void for_each_v_tile(const AttentionProblem& p, int threads, Pack pack) {
  const int64_t tiles = (p.S + kBC - 1) / kBC;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t it = 0; it < p.B * p.Hkv * tiles; ++it) {
    const int64_t bg = it / tiles, j0 = it % tiles * kBC;
    pack(bg, j0, std::min<int64_t>(kBC, p.S - j0));
  }
}

// V's pairs for every (batch, key/value head), [B * Hkv][bf16_pairs(S)][Dv]
// words in the caller's scratch (as many bytes as V itself): key pairs
// (0, 1), (2, 3), ... of each head, the last one's high half 0 when S is
// odd. Packing per tile repacked each V tile once per query block that read
// it (2.5% of the samples of the bf16 kernel at N = S = 2048, D = 64); now
// once, rows no query sees included.
const uint32_t* pack_all_v_pairs(const AttentionProblem& p, int threads) {
  const int64_t pairs = bf16_pairs(p.S);
  const size_t words = static_cast<size_t>(p.B * p.Hkv * pairs * p.Dv);
  uint32_t* v2 = reinterpret_cast<uint32_t*>(caller_scratch(words));
  for_each_v_tile(p, threads, [&](int64_t bg, int64_t j0, int64_t nj) {
    pack_v_bf16_avx512(v2 + (bg * pairs + j0 / 2) * p.Dv, p.v.row<uint16_t>(bg, j0),
                       p.v.row_stride, nj, p.Dv);
  });
  return v2;
}

// Every (batch, key/value head)'s V transposed, [B * Hkv][Dv][vt_row_stride(S)]
// bf16 in the caller's scratch: the A tiles of the AMX P·V, once per head
// even when N <= kBR (each tile of V would be transposed once there anyway).
const uint16_t* pack_all_vt(const AttentionProblem& p, int threads) {
  const int64_t ldt = vt_row_stride(p.S);
  const size_t halves = static_cast<size_t>(p.B * p.Hkv * p.Dv * ldt);
  uint16_t* vt = reinterpret_cast<uint16_t*>(caller_scratch((halves + 1) / 2));
  for_each_v_tile(p, threads, [&](int64_t bg, int64_t j0, int64_t nj) {
    pack_vt_bf16(vt + bg * p.Dv * ldt + j0, ldt, p.v.row<uint16_t>(bg, j0), p.v.row_stride, nj,
                 p.Dv);
  });
  return vt;
}

void prefill(const Ctx& ctx, float* out, float* lse, int threads) {
  Ctx c = ctx;
  if (c.amx) {
    c.v_cols = pack_all_vt(c.p, threads);
  } else if (c.dp_bf16 && c.p.N > kBR) {
    // With one query block per head each V tile is packed once anyway.
    c.v_pairs = pack_all_v_pairs(c.p, threads);
  }
  TeamWorkspaces team(c.p, threads);
  for_each_query_block(c.p, threads, [&](const Block& blk) {
    Workspace& ws = team.mine();
    make_workspace(c.p, blk, team.scratch.slot(), ws);
    run_block(c, blk, ws);
    finalize(c, blk, ws, out, lse);
  });
}

// Split-KV decode: every (batch, key/value head, chunk of kSplitKeys keys)
// leaves per-row partials (m, l, O[Dv]); they merge per row in chunk order.
void decode(const Ctx& c, float* out, float* lse, int threads) {
  const AttentionProblem& p = c.p;
  const int64_t chunks = (p.S + kSplitKeys - 1) / kSplitKeys;
  const int64_t rows = p.group * p.N;  // per (batch, key/value head)
  const int64_t rec = 2 + p.Dv;        // m, l, O
  float* partial = caller_scratch(static_cast<size_t>(p.B * p.Hkv * chunks * rows * rec));
  TeamWorkspaces team(p, threads);
  const int64_t items = p.B * p.Hkv * chunks;
  // Static, contiguous items per thread: consecutive chunks of a head are
  // consecutive in memory, so each core streams one run of K and V and its
  // hardware prefetcher never loses the stream at a chunk boundary (chunks
  // are equal work; dynamic scheduling interleaved them, ~4% slower).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t bg = it / chunks, ch = it % chunks;
    const Block blk{bg / p.Hkv, bg % p.Hkv, 0, static_cast<int>(p.N), ch * kSplitKeys,
                    std::min(p.S, (ch + 1) * kSplitKeys)};
    Workspace& ws = team.mine();
    make_workspace(p, blk, team.scratch.slot(), ws);
    ws.scan = p.kv_scan ? &team.scans[omp_get_thread_num()] : nullptr;
    run_block(c, blk, ws);
    // Partial rows in (head, position) order, whatever the panel layout.
    float* dst = partial + it * rows * rec;
    for (const Panel& pn : ws.panels)
      for (int r = 0; r < pn.rows(); ++r, dst += rec) {
        dst[0] = pn.m[r];
        dst[1] = pn.l[r];
        for (int64_t e = 0; e < p.Dv; ++e) dst[2 + e] = pn.O[r * p.Dv + e];
      }
  }
  // Merge: M = max_c m_c, L = sum_c l_c e^(m_c - M), O = sum_c O_c e^(m_c - M) / L.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t bg = 0; bg < p.B * p.Hkv; ++bg)
    for (int64_t r = 0; r < rows; ++r) {
      auto part = [&](int64_t ch) { return partial + ((bg * chunks + ch) * rows + r) * rec; };
      // Row r of key/value head g is query head g*group + r/N, position r%N.
      const int64_t row = ((bg / p.Hkv) * p.Hq + (bg % p.Hkv) * p.group) * p.N + r;
      float* o = out + row * p.Dv;
      float M = -INFINITY;
      for (int64_t ch = 0; ch < chunks; ++ch) M = std::fmax(M, part(ch)[0]);
      for (int64_t e = 0; e < p.Dv; ++e) o[e] = 0.0f;
      float L = 0.0f;
      for (int64_t ch = 0; ch < chunks && M != -INFINITY; ++ch) {
        const float* pc = part(ch);
        if (pc[1] == 0.0f) continue;
        const float w = std::exp(pc[0] - M);
        L += pc[1] * w;
        for (int64_t e = 0; e < p.Dv; ++e) o[e] += pc[2 + e] * w;
      }
      const float inv = L > 0.0f ? 1.0f / L : 0.0f;  // no chunk saw a key: 0
      for (int64_t e = 0; e < p.Dv; ++e) o[e] *= inv;
      if (lse) lse[row] = L > 0.0f ? M + std::log(L) : -INFINITY;
    }
  if (p.kv_scan) {
    // A NaN or Inf in a value row read makes its output NaN or Inf (w * inf,
    // 0 * inf and NaN all stay), as does an accumulator past float32's
    // range; with the raw scores' sums that is everything to report.
    float bad = 0.0f;
    for (const ScanState& s : team.scans)
      for (float x : s.acc) bad += x;
    const int64_t n = p.B * p.Hq * p.N * p.Dv;
    for (int64_t x = 0; x < n; ++x) bad += out[x] - out[x];
    p.kv_scan->bad = bad != 0.0f;
  }
}

// weights[b, h, i, j] = exp(s_ij - lse_i), recomputing each score tile: the
// exact weights without ever holding more than a tile of scores. Panel rows
// are consecutive rows of W (a stacked panel covers all N positions of
// consecutive heads).
void weights_pass(const Ctx& c, const float* lse, float* W, int threads) {
  const AttentionProblem& p = c.p;
  TeamWorkspaces team(p, threads);
  for_each_query_block(p, threads, [&](const Block& blk) {
    Workspace& ws = team.mine();
    make_workspace(p, blk, team.scratch.slot(), ws);
    int64_t first, end;
    visible_range(c, blk, first, end);
    const AmxTiles tiles(c.amx);
    for (Panel& pn : ws.panels) {
      const int64_t row0 = out_row(p, blk, pn, 0);
      float* Wp = W + row0 * p.S;
      for (int64_t x = 0; x < pn.rows() * p.S; ++x) Wp[x] = 0.0f;
      pack_queries(c, blk, pn);
      // `weights` reads lse in whole vectors: a padded copy (alpha is free
      // here), never past the end of the caller's lse.
      for (int r = 0; r < kBR; ++r) ws.alpha[r] = r < pn.rows() ? lse[row0 + r] : -INFINITY;
      for (int64_t j0 = first; j0 < end; j0 += kBC) {
        const int64_t nj = std::min<int64_t>(kBC, end - j0);
        const TileKV kv = load_tile(c, blk, ws, j0, nj, c.widens(), false);
        score_tile(c, blk, pn, kv, j0, nj, ws);
        c.kern.weights(Wp + j0, p.S, ws.St, nj, pn.rows(), ws.alpha);
      }
    }
  });
}

}  // namespace

void flash_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                   bool want_lse, int threads, Isa isa) {
  const bool bf16 = p.dtype == DType::bf16;
  Ctx c{p, flash_kernels(isa), needs_elementwise(p), bf16, bf16 && isa >= Isa::avx512bf16};
  c.amx = bf16 && isa == Isa::amx && amx_shape_ok(p.D, p.Dv) && p.N > kDecodeRows;
  // The weights pass needs each row's lse even when the caller does not.
  std::vector<float> own_lse;
  float* lse = want_lse ? res.lse.data<float>() : nullptr;
  if (want_weights && !lse) {
    own_lse.resize(static_cast<size_t>(p.B * p.Hq * p.N));
    lse = own_lse.data();
  }
  // A bf16 out is accumulated in float32 and rounded once at the end.
  const bool round_out = res.out.dtype() == DType::bf16;
  // Every element is written before it is read: no zero-fill (at the GPT's
  // training shape, zeroing this buffer was 3% of the call).
  const auto own_out =
      round_out ? std::make_unique_for_overwrite<float[]>(static_cast<size_t>(res.out.numel()))
                : nullptr;
  float* out = round_out ? own_out.get() : res.out.data<float>();
  if (p.N <= kDecodeRows)
    decode(c, out, lse, threads);
  else
    prefill(c, out, lse, threads);
  if (round_out) {
    bfloat16* o = res.out.data<bfloat16>();
    const int64_t n = res.out.numel();
#pragma omp parallel for schedule(static) num_threads(threads) if (n > (1 << 16))
    for (int64_t x = 0; x < n; ++x) o[x] = bf16_from_float(out[x]);
  }
  if (want_weights) weights_pass(c, lse, res.weights.data<float>(), threads);
}

}  // namespace qkv::kernels
