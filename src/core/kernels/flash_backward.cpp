// flash_backward.cpp: the tiled, threaded backward around the micro-kernels
// (FlashAttention-2's algorithm: recompute each score tile from lse).
//
// In the transposed layout of flash_kernels.h (keys in rows, queries in
// columns), one panel of queries against one key tile:
//   P  = exp(St - lse)                 St = K·(scale·Q)ᵀ, masked as the forward
//   dP = V·dOᵀ                         (qk, with V for K and dO for Q)
//   dS = P ∘ (dP - D) · cap' · scale   D_i = dout_i · out_i, per panel
//   dV_j += Σ_i P[j][i] dO_i,   dK_j += Σ_i dS[j][i] q_i,   dQ_i += Σ_j dS[j][i] k_j
// How panels and tiles are spread over threads is backward_schedule.h's.
//
// Determinism. Each gradient element is one chain of multiply-adds (mac) in
// the schedule's fixed order. A score, weight or dS element does not depend
// on how tiles are cut (qk, qk_rows and the element-wise kernels work per
// element; which of qk and qk_rows depends on the panel alone), so both
// schedules give the same bits.
#include "core/kernels/flash_backward.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/backward_schedule.h"
#include "core/kernels/flash_kernels.h"
#include "core/kernels/flash_tiles.h"

namespace qkv::kernels {
namespace {

// q [B, Hq, N, D], k [B, Hkv, S, D] and v [B, Hkv, S, Dv] are read through
// p.q, p.k, p.v (rows of any stride, as in the forward); the rest is
// C-ordered.
struct Ctx {
  const AttentionProblem& p;
  const FlashKernels& kern;
  const float* dO;   // [B, Hq, N, Dv]
  const float* O;    // [B, Hq, N, Dv]: the forward's out
  const float* lse;  // [B, Hq, N]
  BackwardGrads g;   // dQ [B, Hq, N, D], dK [B, Hkv, S, D], dV [B, Hkv, S, Dv]
  bool elementwise;  // mask, ALiBi or soft-cap touch every tile
};

using Panel = BackwardPanel;

// A thread's scratch, cut into the packed panel and three tiles.
struct Workspace {
  float* Qt;    // [D][kBR]  q · scale, transposed, zero padding columns;
                //   or, by_rows, Q [npos][D] · scale for qk_rows
  float* dOt;   // [Dv][kBR] dout transposed; zero padding columns
  float* lse;   // [kBR], -inf padding: padding columns get P = 0
  float* Dd;    // [kBR] D_i = dout_i · out_i; 0 padding
  float* P;     // [kBC][kBR] scores, then weights
  float* dS;    // [kBC][kBR] dP, then dS (edge_step: blocks it skips stale)
  float* dcap;  // [kBC][kBR] soft-cap's derivative; null without soft-cap
};

size_t workspace_floats(const AttentionProblem& p) {
  return static_cast<size_t>((p.D + p.Dv + 2) * kBR + 3 * kBC * kBR);
}

// The calling OpenMP thread's workspace, in its slice of the team's scratch
// (sized before the parallel region: nothing inside it allocates).
Workspace make_workspace(const AttentionProblem& p, float* slot) {
  Workspace ws;
  ws.Qt = slot;
  ws.dOt = ws.Qt + p.D * kBR;
  ws.lse = ws.dOt + p.Dv * kBR;
  ws.Dd = ws.lse + kBR;
  ws.P = ws.Dd + kBR;
  ws.dS = ws.P + kBC * kBR;
  ws.dcap = p.softcap > 0.0 ? ws.dS + kBC * kBR : nullptr;
  // mask_tile fills only a panel's columns; dscores also reads the padding
  // columns (results never used), which must not hold stray denormals.
  if (ws.dcap) std::fill(ws.dcap, ws.dcap + kBC * kBR, 0.0f);
  return ws;
}

// dst [cols][kBR] = (src [rows][cols], rows ld apart)ᵀ · scale, columns
// rows .. kBR-1 zero. Writes along kBR and reads down the rows (which all
// sit in L1); kept out of line so that both calls run the loop GCC
// vectorises for a general scale (for a copy it left a scalar loop, 42%
// of the pack's time). x · 1 = x exactly, so dOt is dO's bits.
[[gnu::noinline]] void transpose_panel(float* __restrict dst, const float* __restrict src,
                                       int64_t ld, int rows, int64_t cols, float scale) {
  for (int64_t c = 0; c < cols; ++c) {
    float* d = dst + c * kBR;
    for (int r = 0; r < rows; ++r) d[r] = src[r * ld + c] * scale;
    for (int r = rows; r < kBR; ++r) d[r] = 0.0f;
  }
}

// Packs the panel: Qt, dOt, lse and D of its rows.
void pack(const Ctx& c, const Panel& pn, const Workspace& ws) {
  const AttentionProblem& p = c.p;
  const float scale = static_cast<float>(p.scale);  // as the forward packs it
  const int64_t row0 = pn.row0(p);
  const float* dO = c.dO + row0 * p.Dv;  // [npos][Dv]
  row_dots(dO, c.O + row0 * p.Dv, p.Dv, pn.npos, ws.Dd);
  for (int r = 0; r < kBR; ++r) ws.lse[r] = r < pn.npos ? c.lse[row0 + r] : -INFINITY;
  for (int r = pn.npos; r < kBR; ++r) ws.Dd[r] = 0.0f;
  if (pn.by_rows) {
    for (int r = 0; r < pn.npos; ++r) {
      const float* q = p.q.row<float>(pn.bh(p), pn.i0 + r);
      for (int64_t d = 0; d < p.D; ++d) ws.Qt[r * p.D + d] = q[d] * scale;
    }
  } else {
    transpose_panel(ws.Qt, p.q.row<float>(pn.bh(p), pn.i0), p.q.row_stride, pn.npos, p.D, scale);
  }
  transpose_panel(ws.dOt, dO, p.Dv, pn.npos, p.Dv, 1.0f);
}

// The packed panel against keys [j0, j0+nj): P and dS of the tile, then
// dV and dK (kv) and dQ (q) accumulate.
void full_step(const Ctx& c, const Panel& pn, const Workspace& ws, int64_t j0, int64_t nj,
               bool kv, bool q) {
  const AttentionProblem& p = c.p;
  const FlashKernels& f = c.kern;
  const int64_t g = pn.kv(p), row0 = pn.row0(p);
  const float* K = p.k.row<float>(g, j0);  // [nj, D], rows ldk apart
  const float* V = p.v.row<float>(g, j0);  // [nj, Dv], rows ldv apart
  const int64_t ldk = p.k.row_stride, ldv = p.v.row_stride;
  // P [nj][kBR] = exp(mask(K · Qt) - lse): the forward's weights exactly.
  if (pn.by_rows)  // padding columns stay unset; probs zeroes them (lse = -inf)
    f.qk_rows(ws.P, K, ldk, nj, ws.Qt, p.D, pn.npos);
  else
    f.qk(ws.P, K, ldk, nj, ws.Qt, p.D, pn.npos);
  if (!tile_is_interior(p, c.elementwise, pn.b, pn.i0, pn.npos, j0, nj))
    mask_tile(p, TileRows{pn.b, pn.h, pn.i0, pn.npos, pn.npos}, j0, nj, ws.P, ws.dcap);
  f.probs(ws.P, nj, pn.npos, ws.lse);
  // dS [nj][kBR] = P ∘ (V · dOt - D) · cap' · scale.
  f.qk(ws.dS, V, ldv, nj, ws.dOt, p.Dv, pn.npos);
  f.dscores(ws.dS, ws.P, nj, pn.npos, ws.Dd, ws.dcap, static_cast<float>(p.scale));
  if (kv) {
    // dV [nj][Dv] += P [nj][npos] · dO [npos][Dv];  dK [nj][D] += dS · Q [npos][D].
    f.mac(c.g.dV + (g * p.S + j0) * p.Dv, p.Dv, ws.P, kBR, 1, c.dO + row0 * p.Dv, p.Dv, nj,
          pn.npos, p.Dv);
    f.mac(c.g.dK + (g * p.S + j0) * p.D, p.D, ws.dS, kBR, 1, p.q.row<float>(pn.bh(p), pn.i0),
          p.q.row_stride, nj, pn.npos, p.D);
  }
  // dQ [npos][D] += dSᵀ [npos][nj] · K [nj][D].
  if (q) f.mac(c.g.dQ + row0 * p.D, p.D, ws.dS, 1, kBR, K, ldk, pn.npos, nj, p.D);
}

// A tile the visible range cuts through, in the blocks of TileParts::edge
// (backward_schedule.h): the blocks it leaves out hold P = dS = 0 exactly,
// so each gradient element's chain loses only exact zeros and the result is
// what full_step gives.
void edge_step(const Ctx& c, const Panel& pn, const Workspace& ws, int64_t j0, int64_t nj,
               bool kv, bool q) {
  const AttentionProblem& p = c.p;
  const FlashKernels& f = c.kern;
  const int64_t g = pn.kv(p), row0 = pn.row0(p);
  const float* K = p.k.row<float>(g, j0);
  const float* V = p.v.row<float>(g, j0);
  const int64_t ldk = p.k.row_stride, ldv = p.v.row_stride;
  const TileParts t = TileParts::edge(p, pn, j0, nj, q);
  // P, dP and dS of the blocks some pair sees. The blocks skipped keep
  // whatever the scratch held: no product below reads them (a query block's
  // keys lie in blocks its columns were computed for, since both ranges
  // come from the same band). The mask writes the whole tile.
  for (int x = 0; x < t.n_key; ++x) {
    const TilePart& b = t.by_key[x];
    f.qk(ws.P + b.r0 * kBR + b.c0, K + b.r0 * ldk, ldk, b.nr, ws.Qt + b.c0, p.D, b.nc);
    f.qk(ws.dS + b.r0 * kBR + b.c0, V + b.r0 * ldv, ldv, b.nr, ws.dOt + b.c0, p.Dv, b.nc);
  }
  mask_tile(p, TileRows{pn.b, pn.h, pn.i0, pn.npos, pn.npos}, j0, nj, ws.P, ws.dcap);
  for (int x = 0; x < t.n_key; ++x) {
    const TilePart& b = t.by_key[x];
    float* P = ws.P + b.r0 * kBR + b.c0;
    f.probs(P, b.nr, b.nc, ws.lse + b.c0);
    const float* dcap = ws.dcap ? ws.dcap + b.r0 * kBR + b.c0 : nullptr;
    f.dscores(ws.dS + b.r0 * kBR + b.c0, P, b.nr, b.nc, ws.Dd + b.c0, dcap,
              static_cast<float>(p.scale));
  }
  if (kv) {
    const float* Q = p.q.row<float>(pn.bh(p), pn.i0);
    for (int x = 0; x < t.n_key; ++x) {
      const TilePart& b = t.by_key[x];
      f.mac(c.g.dV + (g * p.S + j0 + b.r0) * p.Dv, p.Dv, ws.P + b.r0 * kBR + b.c0, kBR, 1,
            c.dO + (row0 + b.c0) * p.Dv, p.Dv, b.nr, b.nc, p.Dv);
      f.mac(c.g.dK + (g * p.S + j0 + b.r0) * p.D, p.D, ws.dS + b.r0 * kBR + b.c0, kBR, 1,
            Q + b.c0 * p.q.row_stride, p.q.row_stride, b.nr, b.nc, p.D);
    }
  }
  for (int x = 0; q && x < t.n_query; ++x) {
    const TilePart& b = t.by_query[x];
    f.mac(c.g.dQ + (row0 + b.r0) * p.D, p.D, ws.dS + b.c0 * kBR + b.r0, 1, kBR, K + b.c0 * ldk,
          ldk, b.nr, b.nc, p.D);
  }
}

// Which of the two a tile takes depends on the visible range alone: under a
// mask, ALiBi or soft-cap a tile the range does not cut still runs whole
// (full_step applies the element-wise part).
void step(const Ctx& c, const Panel& pn, const Workspace& ws, int64_t j0, int64_t nj, bool kv,
          bool q) {
  if (pn.by_rows || tile_is_interior(c.p, false, pn.b, pn.i0, pn.npos, j0, nj))
    full_step(c, pn, ws, j0, nj, kv, q);
  else
    edge_step(c, pn, ws, j0, nj, kv, q);
}

// The float32 tiles backward_schedule.h runs.
struct F32Tiles {
  using Workspace = kernels::Workspace;
  const Ctx& c;
  size_t scratch_floats() const { return workspace_floats(c.p); }
  Workspace workspace(float* slot) const { return make_workspace(c.p, slot); }
  bool by_rows(int npos) const { return forward_scores_by_rows(c.p, npos); }
  void pack(const Panel& pn, const Workspace& ws, bool) const { kernels::pack(c, pn, ws); }
  void step(const Panel& pn, const Workspace& ws, int64_t j0, int64_t nj, bool kv, bool q) const {
    kernels::step(c, pn, ws, j0, nj, kv, q);
  }
};

}  // namespace

void flash_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                    int threads, const IsaKernels& isa) {
  const Ctx c{p,
              *isa.flash,
              static_cast<const float*>(in.dout),
              static_cast<const float*>(in.out),
              static_cast<const float*>(in.lse),
              BackwardGrads{g.dq.data<float>(), g.dk.data<float>(), g.dv.data<float>()},
              needs_elementwise(p)};
  run_backward(p, F32Tiles{c}, c.g, threads);
}

}  // namespace qkv::kernels
