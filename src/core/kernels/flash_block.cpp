// flash_block.cpp: one block of the forward (flash_block.h): its workspace,
// its packed queries, its score tiles and the online softmax over its keys.
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
#include "core/kernels/flash_block.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/flash_bf16.h"

namespace qkv::kernels::fwd {
namespace {

size_t panel_floats(const AttentionProblem& p) {
  return static_cast<size_t>(p.D * kBR + kBR * p.Dv + 2 * kBR);
}

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

}  // namespace

TeamWorkspaces::TeamWorkspaces(const AttentionProblem& p, int threads)
    : scratch(threads, workspace_floats(p)), ws(threads), scans(threads) {
  for (Workspace& w : ws) w.panels.reserve(p.group);
}

void make_workspace(const AttentionProblem& p, const Block& blk, float* base, Workspace& ws) {
  const bool stacked = stacks_group(p);  // then blk covers all N positions
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
    pack_pairs_bf16(reinterpret_cast<uint32_t*>(pn.Qp), rows, p.D, qrow16);
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

void score_tile(const Ctx& c, const Block& blk, const Panel& pn, const TileKV& kv, int64_t j0,
                int64_t nj, const Workspace& ws) {
  const AttentionProblem& p = c.p;
  float* St = ws.St;
  if (uses_amx(c, pn))
    c.amx->qk(St, p.k.row<uint16_t>(blk.b * p.Hkv + blk.g, j0), p.k.row_stride, nj,
              reinterpret_cast<const uint32_t*>(pn.Qp), p.D, pn.rows(),
              static_cast<float>(p.scale), ws.kpad);
  else if (uses_dp_bf16(c, pn))  // K [nj, D] bf16 in place, rows ldk apart
    c.dp->qk(St, p.k.row<uint16_t>(blk.b * p.Hkv + blk.g, j0), p.k.row_stride, nj,
             reinterpret_cast<const uint32_t*>(pn.Qp), p.D, pn.rows(),
             static_cast<float>(p.scale));
  else if (uses_rows_bf16(c, pn))
    c.dp->qk_rows(St, p.k.row<uint16_t>(blk.b * p.Hkv + blk.g, j0), p.k.row_stride, nj,
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
    if (decode && c.dp) {  // 32 bf16 to a cache line
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
        c.dp->softmax_pairs(ws.P2, ws.St, nj, pn.rows(), pn.m, pn.l, ws.alpha);
        if (uses_amx(c, pn)) {
          const int64_t ldt = vt_row_stride(p.S);
          c.amx->pv(pn.O, ws.P2, nj, pn.rows(), c.v_cols + bg * p.Dv * ldt + j0, ldt, p.Dv,
                    ws.alpha, ws.vpad);
          continue;
        }
        if (!v2) {
          c.dp->pack_v(ws.V2, p.v.row<uint16_t>(bg, j0), p.v.row_stride, nj, p.Dv);
          v2 = ws.V2;
        }
        c.dp->pv(pn.O, ws.P2, nj, pn.rows(), v2, p.Dv, ws.alpha);
        continue;
      }
      c.kern.softmax(ws.St, nj, pn.rows(), pn.m, pn.l, ws.alpha);
      if (uses_rows_bf16(c, pn)) {
        c.dp->pack_p(ws.P2, ws.St, nj, pn.rows());
        c.dp->pv_rows(pn.O, ws.P2, nj, pn.rows(), p.v.row<uint16_t>(bg, j0),
                      p.v.row_stride, p.Dv, ws.alpha);
      } else {
        c.kern.pv(pn.O, ws.St, nj, pn.rows(), kv.V, kv.ldv, p.Dv, ws.alpha);
      }
    }
  }
}

}  // namespace qkv::kernels::fwd
