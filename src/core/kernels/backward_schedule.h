// backward_schedule.h: how the backward's work is cut and spread over
// threads, shared by the float32 tiles (flash_backward.cpp) and the bf16
// tiles (flash_backward_bf16.cpp), which differ only in how one panel meets
// one key tile.
//
// A panel is up to kBR positions of one query head h of batch element b; a
// key tile is up to kBC keys of its key/value head g = h / group.
//
// Determinism. Every gradient element is one chain of accumulations in a
// fixed order: dQ_i over its visible keys in ascending order; dK_j and dV_j
// over the group's heads, then positions, ascending. So two schedules give
// the same bits:
//   one pass   - one item per (b, g) runs every (panel, key tile) pair of the
//                group and owns all of its dQ, dK and dV: 5 products a pair,
//                but only B x Hkv items to spread over the threads;
//   two passes - items (b, g, key tile) accumulate dK and dV (4 products a
//                pair), then items (b, h, query tile) recompute P and dS and
//                accumulate dQ (3 more): 7 products against 5, far more
//                items.
// The schedule follows B x Hkv and the thread count, never the bits.
//
// The Tiles policy a schedule runs:
//   Tiles::Workspace workspace(float* slot) const  a thread's scratch, from
//                                                   a slice of scratch_floats()
//   size_t scratch_floats() const
//   bool by_rows(int npos) const                    the panel's score form
//   void pack(const BackwardPanel&, const Workspace&, bool kv) const
//                                                   the panel, for steps with
//                                                   (kv) or without dK, dV
//   void step(const BackwardPanel&, const Workspace&, int64_t j0, int64_t nj,
//             bool kv, bool q) const               one key tile: dK, dV (kv)
//                                                   and dQ (q) accumulate
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/attention_problem.h"
#include "core/kernels/flash_kernels.h"
#include "core/kernels/flash_tiles.h"
#include "core/runtime/scratch.h"
#include "core/runtime/interrupt.h"
#include "core/values.h"

namespace qkv::kernels {

// Positions [i0, i0+npos) of query head h, batch element b. by_rows: the
// scores come from a rows form (qk_rows), as in the forward.
struct BackwardPanel {
  int64_t b, h, i0;
  int npos;
  bool by_rows;
  int64_t bh(const AttentionProblem& p) const { return b * p.Hq + h; }
  int64_t row0(const AttentionProblem& p) const { return bh(p) * p.N + i0; }
  int64_t kv(const AttentionProblem& p) const { return b * p.Hkv + h / p.group; }
};

// The float32 gradients the tiles accumulate into: dQ [B, Hq, N, D],
// dK [B, Hkv, S, D], dV [B, Hkv, S, Dv], C-ordered.
struct BackwardGrads {
  float* dQ;
  float* dK;
  float* dV;
};

// D_r = dO_r · O_r for rows [0, npos) of the panel, each summed in double
// in one chain, e = 0 .. Dv-1, so it is the same whichever pass packs the
// panel. Four rows at a time: four independent chains, so the loop waits on
// one add's latency per element of four rows, not of one.
template <class TdO, class TO>
void row_dots(const TdO* dO, const TO* O, int64_t Dv, int npos, float* Dd) {
  int r = 0;
  for (; r + 4 <= npos; r += 4) {
    const TdO* a = dO + r * Dv;
    const TO* b = O + r * Dv;
    double d0 = 0.0, d1 = 0.0, d2 = 0.0, d3 = 0.0;
    for (int64_t e = 0; e < Dv; ++e) {
      d0 += as_double(a[e]) * as_double(b[e]);
      d1 += as_double(a[Dv + e]) * as_double(b[Dv + e]);
      d2 += as_double(a[2 * Dv + e]) * as_double(b[2 * Dv + e]);
      d3 += as_double(a[3 * Dv + e]) * as_double(b[3 * Dv + e]);
    }
    Dd[r] = static_cast<float>(d0);
    Dd[r + 1] = static_cast<float>(d1);
    Dd[r + 2] = static_cast<float>(d2);
    Dd[r + 3] = static_cast<float>(d3);
  }
  for (; r < npos; ++r) {
    double d = 0.0;
    for (int64_t e = 0; e < Dv; ++e) d += as_double(dO[r * Dv + e]) * as_double(O[r * Dv + e]);
    Dd[r] = static_cast<float>(d);
  }
}

// The parts of a key tile a panel's products run on. A part is rows
// [r0, r0+nr) (keys of the tile, or queries of the panel) against columns
// [c0, c0+nc) (queries, or keys), offsets into the tile and the panel.
struct TilePart {
  int64_t r0, nr;
  int c0, nc;
};

// kSub: the side of the blocks a cut tile is taken in. Even, so a pair of
// bf16 (2t, 2t+1) never straddles two blocks.
constexpr int kSub = 16;
static_assert(kBR % kSub == 0 && kBC % kSub == 0, "blocks tile the panel and the key tile");

struct TileParts {
  TilePart by_key[kBC / kSub];    // key rows x panel columns: scores, dV, dK
  TilePart by_query[kBR / kSub];  // panel rows x key columns: dQ
  int n_key = 0, n_query = 0;

  // The whole tile: one part each way.
  static TileParts whole(int npos, int64_t nj) {
    TileParts t;
    t.by_key[t.n_key++] = TilePart{0, nj, 0, npos};
    t.by_query[t.n_query++] = TilePart{0, npos, 0, static_cast<int>(nj)};
    return t;
  }

  // A tile the visible range cuts through (a causal diagonal, a window's
  // edge, the end of a padded sequence), in blocks of kSub keys x kSub
  // queries: only the blocks where some query sees some key (elsewhere
  // P = dS = 0 exactly, so a chain that skips them loses only exact zeros).
  // Visibility is a band: query i sees keys [first_key(i), last_key(i)],
  // both rising with i, so the queries that see a block of keys, and the
  // keys a block of queries sees, are contiguous ranges, rounded out to kSub
  // here. by_query only when asked for (the dQ products need it).
  static TileParts edge(const AttentionProblem& p, const BackwardPanel& pn, int64_t j0, int64_t nj,
                        bool with_query) {
    TileParts t;
    for (int64_t ja = 0; ja < nj; ja += kSub) {
      const int64_t nb = std::min<int64_t>(kSub, nj - ja);  // keys j0 + [ja, ja + nb)
      int lo = 0, hi = pn.npos;
      while (lo < hi && p.last_key(pn.b, pn.i0 + lo) < j0 + ja) ++lo;
      while (hi > lo && p.first_key(pn.i0 + hi - 1) >= j0 + ja + nb) --hi;
      if (lo >= hi) continue;
      lo = lo / kSub * kSub;
      hi = std::min(pn.npos, (hi + kSub - 1) / kSub * kSub);
      t.by_key[t.n_key++] = TilePart{ja, nb, lo, hi - lo};
    }
    for (int ia = 0; with_query && ia < pn.npos; ia += kSub) {
      const int rows = std::min(kSub, pn.npos - ia);  // queries pn.i0 + [ia, ia + rows)
      int64_t lo = std::max(p.first_key(pn.i0 + ia), j0) - j0;
      int64_t hi = std::min(p.last_key(pn.b, pn.i0 + ia + rows - 1) + 1, j0 + nj) - j0;
      if (lo >= hi) continue;
      lo = lo / kSub * kSub;
      hi = std::min(nj, (hi + kSub - 1) / kSub * kSub);
      t.by_query[t.n_query++] =
          TilePart{ia, rows, static_cast<int>(lo), static_cast<int>(hi - lo)};
    }
    return t;
  }
};

namespace schedule {

// The panel against its visible keys within [kbeg, kend), in tiles of kBC
// from the first visible key (the forward's walk).
template <class Tiles>
void walk(const AttentionProblem& p, const Tiles& t, const BackwardPanel& pn,
          const typename Tiles::Workspace& ws, int64_t kbeg, int64_t kend, bool kv, bool q) {
  int64_t first, end;
  visible_keys(p, pn.b, pn.i0, pn.npos, kbeg, kend, first, end);
  if (first >= end) return;
  t.pack(pn, ws, kv);
  for (int64_t j0 = first; j0 < end; j0 += kBC)
    t.step(pn, ws, j0, std::min<int64_t>(kBC, end - j0), kv, q);
}

template <class Tiles>
BackwardPanel panel(const AttentionProblem& p, const Tiles& t, int64_t b, int64_t h, int64_t qt) {
  const int npos = static_cast<int>(std::min<int64_t>(kBR, p.N - qt * kBR));
  return BackwardPanel{b, h, qt * kBR, npos, t.by_rows(npos)};
}

inline void zero(float* x, int64_t n) { std::fill(x, x + n, 0.0f); }

// One item per (b, g): all of the group's panels against all their keys.
template <class Tiles>
void one_pass(const AttentionProblem& p, const Tiles& t, const BackwardGrads& g, int threads) {
  const int64_t n_qt = (p.N + kBR - 1) / kBR;
  const TeamScratch team(threads, t.scratch_floats());
  Interrupt interrupt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t bg = 0; bg < p.B * p.Hkv; ++bg) {
    if (interrupt.stop()) continue;
    const int64_t b = bg / p.Hkv, h0 = (bg % p.Hkv) * p.group;
    zero(g.dK + bg * p.S * p.D, p.S * p.D);
    zero(g.dV + bg * p.S * p.Dv, p.S * p.Dv);
    zero(g.dQ + (b * p.Hq + h0) * p.N * p.D, p.group * p.N * p.D);
    const typename Tiles::Workspace ws = t.workspace(team.slot());
    // An item is a whole group's work: asked again per panel.
    for (int64_t h = h0; h < h0 + p.group; ++h)
      for (int64_t qt = 0; qt < n_qt && !interrupt.stop(); ++qt)
        walk(p, t, panel(p, t, b, h, qt), ws, 0, p.S, true, true);
  }
  interrupt.throw_if_stopped();
}

// dK, dV by (b, g, key tile), then dQ by (b, h, query tile).
template <class Tiles>
void two_passes(const AttentionProblem& p, const Tiles& t, const BackwardGrads& g, int threads) {
  const int64_t n_qt = (p.N + kBR - 1) / kBR, n_kt = (p.S + kBC - 1) / kBC;
  const int64_t BG = p.B * p.Hkv, BH = p.B * p.Hq;
  const TeamScratch team(threads, t.scratch_floats());
  Interrupt interrupt;
  // First key tiles first: under a causal mask the most queries see them.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < BG * n_kt; ++it) {
    if (interrupt.stop()) continue;
    const int64_t bg = it % BG, j0 = it / BG * kBC, nj = std::min<int64_t>(kBC, p.S - j0);
    const int64_t b = bg / p.Hkv, h0 = (bg % p.Hkv) * p.group;
    zero(g.dK + (bg * p.S + j0) * p.D, nj * p.D);
    zero(g.dV + (bg * p.S + j0) * p.Dv, nj * p.Dv);
    const typename Tiles::Workspace ws = t.workspace(team.slot());
    for (int64_t h = h0; h < h0 + p.group; ++h)
      for (int64_t qt = 0; qt < n_qt && !interrupt.stop(); ++qt)
        walk(p, t, panel(p, t, b, h, qt), ws, j0, j0 + nj, true, false);
  }
  interrupt.throw_if_stopped();
  // Last query tiles first, for the same reason.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < BH * n_qt; ++it) {
    if (interrupt.stop()) continue;
    const int64_t bh = it % BH, qt = n_qt - 1 - it / BH;
    const BackwardPanel pn = panel(p, t, bh / p.Hq, bh % p.Hq, qt);
    zero(g.dQ + pn.row0(p) * p.D, pn.npos * p.D);
    walk(p, t, pn, t.workspace(team.slot()), 0, p.S, false, true);
  }
  interrupt.throw_if_stopped();
}

}  // namespace schedule

// Runs the backward of `p` with `t`'s tiles. Two passes cost 1.58x one pass
// on one thread (float32, B=1, H=8, N=S=1024, D=64: 86 ms against 54.7 ms),
// but spread over far more items. One pass wins unless its B x Hkv items
// would leave over a third of the thread time idle (rounds x threads >
// 1.5 x items).
template <class Tiles>
void run_backward(const AttentionProblem& p, const Tiles& t, const BackwardGrads& g, int threads) {
  const int64_t items = p.B * p.Hkv, rounds = (items + threads - 1) / threads;
  if (2 * rounds * threads <= 3 * items)
    schedule::one_pass(p, t, g, threads);
  else
    schedule::two_passes(p, t, g, threads);
}

}  // namespace qkv::kernels
