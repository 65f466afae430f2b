// flash_backward.cpp: the tiled, threaded backward around the micro-kernels
// (FlashAttention-2's algorithm: recompute each score tile from lse).
//
// A panel is up to kBR positions of one query head h of batch element b; a
// key tile is up to kBC keys of its key/value head g = h / group. In the
// transposed layout of flash_kernels.h (keys in rows, queries in columns):
//   P  = exp(St - lse)                 St = K·(scale·Q)ᵀ, masked as the forward
//   dP = V·dOᵀ                         (qk, with V for K and dO for Q)
//   dS = P ∘ (dP - D) · cap' · scale   D_i = dout_i · out_i, per panel
//   dV_j += Σ_i P[j][i] dO_i,   dK_j += Σ_i dS[j][i] q_i,   dQ_i += Σ_j dS[j][i] k_j
//
// Determinism. Every gradient element is one chain of multiply-adds (mac) in
// a fixed order: dQ_i over its visible keys in ascending order; dK_j and dV_j
// over the group's heads, then positions, ascending. A score, weight or dS
// element does not depend on how tiles are cut (qk, qk_rows and the
// element-wise kernels work per element; which of qk and qk_rows depends on
// the panel alone), so two schedules give the same bits:
//   one pass   - one item per (b, g) runs every (panel, key tile) pair of the
//                group and owns all of its dQ, dK and dV: 5 products a pair,
//                but only B x Hkv items to spread over the threads;
//   two passes - items (b, g, key tile) accumulate dK and dV (4 products a
//                pair), then items (b, h, query tile) recompute P and dS and
//                accumulate dQ (3 more): 7 products against 5, far more
//                items.
// The schedule follows B x Hkv and the thread count (flash_backward), never
// the bits.
#include "core/kernels/flash_backward.h"

#include <algorithm>
#include <cmath>

#include "core/kernels/flash_kernels.h"
#include "core/kernels/flash_tiles.h"
#include "core/runtime/scratch.h"

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
  float* dQ;         // [B, Hq, N, D]
  float* dK;         // [B, Hkv, S, D]
  float* dV;         // [B, Hkv, S, Dv]
  bool elementwise;  // mask, ALiBi or soft-cap touch every tile
};

// Positions [i0, i0+npos) of query head h, batch element b. by_rows: the
// scores come from qk_rows, as in the forward (forward_scores_by_rows).
struct Panel {
  int64_t b, h, i0;
  int npos;
  bool by_rows;
  int64_t bh(const AttentionProblem& p) const { return b * p.Hq + h; }
  int64_t row0(const AttentionProblem& p) const { return bh(p) * p.N + i0; }
  int64_t kv(const AttentionProblem& p) const { return b * p.Hkv + h / p.group; }
};

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
Workspace make_workspace(const AttentionProblem& p, const TeamScratch& team) {
  Workspace ws;
  ws.Qt = team.slot();
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

// D_r = dO_r · O_r for rows [0, npos) of the panel, each summed in double
// in one chain, e = 0 .. Dv-1, so it is the same whichever pass packs the
// panel. Four rows at a time: four independent chains, so the loop waits on
// one add's latency per element of four rows, not of one.
void row_dots(const float* dO, const float* O, int64_t Dv, int npos, float* Dd) {
  int r = 0;
  for (; r + 4 <= npos; r += 4) {
    const float *a = dO + r * Dv, *b = O + r * Dv;
    double d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0;
    for (int64_t e = 0; e < Dv; ++e) {
      d0 += static_cast<double>(a[e]) * b[e];
      d1 += static_cast<double>(a[Dv + e]) * b[Dv + e];
      d2 += static_cast<double>(a[2 * Dv + e]) * b[2 * Dv + e];
      d3 += static_cast<double>(a[3 * Dv + e]) * b[3 * Dv + e];
    }
    Dd[r] = static_cast<float>(d0);
    Dd[r + 1] = static_cast<float>(d1);
    Dd[r + 2] = static_cast<float>(d2);
    Dd[r + 3] = static_cast<float>(d3);
  }
  for (; r < npos; ++r) {
    double d = 0.0;
    for (int64_t e = 0; e < Dv; ++e) d += static_cast<double>(dO[r * Dv + e]) * O[r * Dv + e];
    Dd[r] = static_cast<float>(d);
  }
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
    f.mac(c.dV + (g * p.S + j0) * p.Dv, p.Dv, ws.P, kBR, 1, c.dO + row0 * p.Dv, p.Dv, nj,
          pn.npos, p.Dv);
    f.mac(c.dK + (g * p.S + j0) * p.D, p.D, ws.dS, kBR, 1, p.q.row<float>(pn.bh(p), pn.i0),
          p.q.row_stride, nj, pn.npos, p.D);
  }
  // dQ [npos][D] += dSᵀ [npos][nj] · K [nj][D].
  if (q) f.mac(c.dQ + row0 * p.D, p.D, ws.dS, 1, kBR, K, ldk, pn.npos, nj, p.D);
}

// A tile the visible range cuts through (a causal diagonal, a window's
// edge, the end of a padded sequence) in blocks of kSub keys x kSub
// queries: a block where no query sees any key holds P = dS = 0 exactly,
// so its products are skipped. Each gradient element's chain then leaves
// out only terms that are exact zeros, so the result is what full_step
// gives. Visibility is a band: query i sees keys [first_key(i),
// last_key(i)], both rising with i, so the queries that see a block of
// keys, and the keys a block of queries sees, are contiguous ranges.
constexpr int kSub = 16;
static_assert(kBR % kSub == 0 && kBC % kSub == 0, "blocks tile the panel and the key tile");

struct Range {
  int lo = 0, hi = 0;  // [lo, hi), rounded out to kSub and clipped
  bool empty() const { return lo >= hi; }
};

void edge_step(const Ctx& c, const Panel& pn, const Workspace& ws, int64_t j0, int64_t nj,
               bool kv, bool q) {
  const AttentionProblem& p = c.p;
  const FlashKernels& f = c.kern;
  const int64_t g = pn.kv(p), row0 = pn.row0(p);
  const float* K = p.k.row<float>(g, j0);
  const float* V = p.v.row<float>(g, j0);
  const int64_t ldk = p.k.row_stride, ldv = p.v.row_stride;
  const int nkb = static_cast<int>((nj + kSub - 1) / kSub), nqb = (pn.npos + kSub - 1) / kSub;
  // Key block kb is seen by the panel's columns cols[kb]; query block qb
  // sees the tile's keys keys[qb] (both offsets into the tile).
  Range cols[kBC / kSub], keys[kBR / kSub];
  for (int kb = 0; kb < nkb; ++kb) {
    const int64_t ja = j0 + kb * kSub, jb = std::min(j0 + nj, ja + kSub);  // keys [ja, jb)
    int lo = 0, hi = pn.npos;
    while (lo < hi && p.last_key(pn.b, pn.i0 + lo) < ja) ++lo;
    while (hi > lo && p.first_key(pn.i0 + hi - 1) >= jb) --hi;
    cols[kb] = lo < hi ? Range{lo / kSub * kSub, std::min(pn.npos, (hi + kSub - 1) / kSub * kSub)}
                       : Range{};
  }
  for (int qb = 0; q && qb < nqb; ++qb) {
    const int64_t ia = pn.i0 + qb * kSub, ib = std::min<int64_t>(pn.i0 + pn.npos, ia + kSub);
    const int64_t lo = std::max(p.first_key(ia), j0) - j0;
    const int64_t hi = std::min(p.last_key(pn.b, ib - 1) + 1, j0 + nj) - j0;
    keys[qb] = lo < hi ? Range{static_cast<int>(lo / kSub * kSub),
                               static_cast<int>(std::min(nj, (hi + kSub - 1) / kSub * kSub))}
                       : Range{};
  }
  // P, dP and dS of the blocks some pair sees. The blocks skipped keep
  // whatever the scratch held: no product below reads them (a query block's
  // keys lie in blocks its columns were computed for, since both ranges
  // come from the same band). The mask writes the whole tile.
  for (int kb = 0; kb < nkb; ++kb) {
    if (cols[kb].empty()) continue;
    const int64_t ja = kb * kSub, nb = std::min<int64_t>(kSub, nj - ja);
    const int lo = cols[kb].lo, n = cols[kb].hi - lo;
    f.qk(ws.P + ja * kBR + lo, K + ja * ldk, ldk, nb, ws.Qt + lo, p.D, n);
    f.qk(ws.dS + ja * kBR + lo, V + ja * ldv, ldv, nb, ws.dOt + lo, p.Dv, n);
  }
  mask_tile(p, TileRows{pn.b, pn.h, pn.i0, pn.npos, pn.npos}, j0, nj, ws.P, ws.dcap);
  for (int kb = 0; kb < nkb; ++kb) {
    if (cols[kb].empty()) continue;
    const int64_t ja = kb * kSub, nb = std::min<int64_t>(kSub, nj - ja);
    const int lo = cols[kb].lo, n = cols[kb].hi - lo;
    float* P = ws.P + ja * kBR + lo;
    f.probs(P, nb, n, ws.lse + lo);
    const float* dcap = ws.dcap ? ws.dcap + ja * kBR + lo : nullptr;
    f.dscores(ws.dS + ja * kBR + lo, P, nb, n, ws.Dd + lo, dcap, static_cast<float>(p.scale));
  }
  if (kv) {
    const float* Q = p.q.row<float>(pn.bh(p), pn.i0);
    for (int kb = 0; kb < nkb; ++kb) {
      if (cols[kb].empty()) continue;
      const int64_t ja = kb * kSub, nb = std::min<int64_t>(kSub, nj - ja);
      const int lo = cols[kb].lo, n = cols[kb].hi - lo;
      f.mac(c.dV + (g * p.S + j0 + ja) * p.Dv, p.Dv, ws.P + ja * kBR + lo, kBR, 1,
            c.dO + (row0 + lo) * p.Dv, p.Dv, nb, n, p.Dv);
      f.mac(c.dK + (g * p.S + j0 + ja) * p.D, p.D, ws.dS + ja * kBR + lo, kBR, 1,
            Q + lo * p.q.row_stride, p.q.row_stride, nb, n, p.D);
    }
  }
  if (q)
    for (int qb = 0; qb < nqb; ++qb) {
      if (keys[qb].empty()) continue;
      const int64_t ia = qb * kSub, rows = std::min<int64_t>(kSub, pn.npos - ia);
      const int lo = keys[qb].lo, n = keys[qb].hi - lo;
      f.mac(c.dQ + (row0 + ia) * p.D, p.D, ws.dS + lo * kBR + ia, 1, kBR, K + lo * ldk, ldk,
            rows, n, p.D);
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

// The panel against its visible keys within [kbeg, kend), in tiles of kBC
// from the first visible key (the forward's walk).
void walk(const Ctx& c, const Panel& pn, const Workspace& ws, int64_t kbeg, int64_t kend, bool kv,
          bool q) {
  int64_t first, end;
  visible_keys(c.p, pn.b, pn.i0, pn.npos, kbeg, kend, first, end);
  if (first >= end) return;
  pack(c, pn, ws);
  for (int64_t j0 = first; j0 < end; j0 += kBC)
    step(c, pn, ws, j0, std::min<int64_t>(kBC, end - j0), kv, q);
}

Panel panel(const AttentionProblem& p, int64_t b, int64_t h, int64_t qt) {
  const int npos = static_cast<int>(std::min<int64_t>(kBR, p.N - qt * kBR));
  return Panel{b, h, qt * kBR, npos, forward_scores_by_rows(p, npos)};
}

void zero(float* x, int64_t n) { std::fill(x, x + n, 0.0f); }

// One item per (b, g): all of the group's panels against all their keys.
void one_pass(const Ctx& c, int threads) {
  const AttentionProblem& p = c.p;
  const int64_t n_qt = (p.N + kBR - 1) / kBR;
  const TeamScratch team(threads, workspace_floats(p));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t bg = 0; bg < p.B * p.Hkv; ++bg) {
    const int64_t b = bg / p.Hkv, h0 = (bg % p.Hkv) * p.group;
    zero(c.dK + bg * p.S * p.D, p.S * p.D);
    zero(c.dV + bg * p.S * p.Dv, p.S * p.Dv);
    zero(c.dQ + (b * p.Hq + h0) * p.N * p.D, p.group * p.N * p.D);
    const Workspace ws = make_workspace(p, team);
    for (int64_t h = h0; h < h0 + p.group; ++h)
      for (int64_t qt = 0; qt < n_qt; ++qt) walk(c, panel(p, b, h, qt), ws, 0, p.S, true, true);
  }
}

// dK, dV by (b, g, key tile), then dQ by (b, h, query tile).
void two_passes(const Ctx& c, int threads) {
  const AttentionProblem& p = c.p;
  const int64_t n_qt = (p.N + kBR - 1) / kBR, n_kt = (p.S + kBC - 1) / kBC;
  const int64_t BG = p.B * p.Hkv, BH = p.B * p.Hq;
  const TeamScratch team(threads, workspace_floats(p));
  // First key tiles first: under a causal mask the most queries see them.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < BG * n_kt; ++it) {
    const int64_t bg = it % BG, j0 = it / BG * kBC, nj = std::min<int64_t>(kBC, p.S - j0);
    const int64_t b = bg / p.Hkv, h0 = (bg % p.Hkv) * p.group;
    zero(c.dK + (bg * p.S + j0) * p.D, nj * p.D);
    zero(c.dV + (bg * p.S + j0) * p.Dv, nj * p.Dv);
    const Workspace ws = make_workspace(p, team);
    for (int64_t h = h0; h < h0 + p.group; ++h)
      for (int64_t qt = 0; qt < n_qt; ++qt)
        walk(c, panel(p, b, h, qt), ws, j0, j0 + nj, true, false);
  }
  // Last query tiles first, for the same reason.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < BH * n_qt; ++it) {
    const int64_t bh = it % BH, qt = n_qt - 1 - it / BH;
    const Panel pn = panel(p, bh / p.Hq, bh % p.Hq, qt);
    zero(c.dQ + pn.row0(p) * p.D, pn.npos * p.D);
    walk(c, pn, make_workspace(p, team), 0, p.S, false, true);
  }
}

}  // namespace

void flash_backward(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                    int threads, Isa isa) {
  const Ctx c{p,
              flash_kernels(isa),
              static_cast<const float*>(in.dout),
              static_cast<const float*>(in.out),
              static_cast<const float*>(in.lse),
              g.dq.data<float>(),
              g.dk.data<float>(),
              g.dv.data<float>(),
              needs_elementwise(p)};
  // Two passes cost 1.58x one pass on one thread (B=1, H=8, N=S=1024,
  // D=64: 86 ms against 54.7 ms), but spread over far more items. One pass
  // wins unless its B x Hkv items would leave over a third of the thread
  // time idle (rounds x threads > 1.5 x items).
  const int64_t items = p.B * p.Hkv, rounds = (items + threads - 1) / threads;
  if (2 * rounds * threads <= 3 * items)
    one_pass(c, threads);
  else
    two_passes(c, threads);
}

}  // namespace qkv::kernels
