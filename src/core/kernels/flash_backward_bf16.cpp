// flash_backward_bf16.cpp: the backward for bfloat16 inputs on vdpbf16ps
// (AVX512-BF16; AMX CPUs have it too), FlashAttention-2's algorithm in
// flash_backward.cpp's transposed layout (keys in rows, queries in columns)
// with all five products on pairs of bf16 and float32 sums:
//   St = K·Qᵀ · scale   qk_bf16 on Q's pairs along D, K read in place
//   dP = V·dOᵀ          qk_bf16 on dO's pairs along Dv, V read in place
//   dV += P·dO          P rounded to bf16, pairs along the queries
//   dK += dS·Q          dS rounded to bf16, pairs along the queries
//   dQ += dSᵀ·K         dS rounded to bf16, pairs along the keys
// P and dS are computed in float32 and rounded to bf16 only as operands of
// the products that follow (as PyTorch's and FlashAttention's bf16 kernels
// do); D_i, the softmax and dS's arithmetic stay float32, and so do the
// gradients, accumulated in float32 (the op rounds them to bf16 once, at the
// end, unless float32 gradients were asked for).
//
// Where the visible range cuts a tile, only its blocks that some query sees
// some key in run (TileParts::edge, as the float32 edge_step). Each gradient
// element is one chain of vdpbf16ps in the schedule's order
// (backward_schedule.h), pairs aligned to the panel and the tile, and which
// blocks run depends on the tile alone, so results are bitwise the same for
// any thread count. (A bool mask of the same visibility runs every block:
// the same bits too, since a block it adds holds only zero pairs, unless a
// partial sum is a float32 denormal, which vdpbf16ps flushes to 0.)
#include <algorithm>
#include <cmath>

#include "core/kernels/backward_schedule.h"
#include "core/kernels/flash_backward.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_kernels.h"
#include "core/kernels/flash_tiles.h"

namespace qkv::kernels {
namespace {

// q [B, Hq, N, D], k [B, Hkv, S, D] and v [B, Hkv, S, Dv] (bf16) are read
// through p.q, p.k, p.v (rows of any stride); the rest is C-ordered.
struct Ctx {
  const AttentionProblem& p;
  const FlashKernels& kern;    // the float32 element-wise kernels (probs, dscores)
  const FlashBf16Kernels& dp;  // the five products on bf16 pairs
  const uint16_t* dO;          // [B, Hq, N, Dv] bf16
  const void* O;               // [B, Hq, N, Dv] the forward's out, bf16 or float32
  bool out_bf16;
  const float* lse;  // [B, Hq, N]
  BackwardGrads g;
  bool elementwise;  // mask, ALiBi or soft-cap touch every tile
};

constexpr int kPairsBR = kBR / 2, kPairsBC = kBC / 2;

// A thread's scratch: the packed panel, then the tiles. Words are pairs of
// bf16 (low half first).
struct Workspace {
  uint32_t* Qt2;   // [pairs(D)][kBR]  q's pairs along D; zero padding columns
  uint32_t* dOt2;  // [pairs(Dv)][kBR] dout's pairs along Dv; zero padding columns
  uint32_t* Q2;    // [kBR/2][D]  pairs of query rows (2t, 2t+1), element by element
  uint32_t* dO2;   // [kBR/2][Dv] pairs of dout rows
  float* lse;      // [kBR], -inf padding: padding columns get P = 0
  float* Dd;       // [kBR] D_i = dout_i · out_i; 0 padding
  float* P;        // [kBC][kBR] scores, then weights
  float* dS;       // [kBC][kBR] dP, then dS
  float* dcap;     // [kBC][kBR] soft-cap's derivative; null without soft-cap
  uint16_t* Pr;    // [kBC][kBR] P in bf16: per row, pairs along the queries
  uint16_t* dSr;   // [kBC][kBR] dS in bf16, likewise
  uint32_t* dS2;   // [kBC/2][kBR] dS's pairs along the keys
  uint32_t* K2;    // [kBC/2][D] pairs of the tile's key rows
};

size_t workspace_floats(const AttentionProblem& p) {
  const int64_t D2 = bf16_pairs(p.D), Dv2 = bf16_pairs(p.Dv);
  return static_cast<size_t>((D2 + Dv2) * kBR + kPairsBR * (p.D + p.Dv) + 2 * kBR +
                             3 * kBC * kBR + 2 * (kBC * kBR / 2) + kPairsBC * kBR +
                             kPairsBC * p.D);
}

Workspace make_workspace(const AttentionProblem& p, float* slot) {
  Workspace ws;
  auto words = [&](int64_t n) {
    uint32_t* w = reinterpret_cast<uint32_t*>(slot);
    slot += n;
    return w;
  };
  auto floats = [&](int64_t n) {
    float* f = slot;
    slot += n;
    return f;
  };
  ws.Qt2 = words(bf16_pairs(p.D) * kBR);
  ws.dOt2 = words(bf16_pairs(p.Dv) * kBR);
  ws.Q2 = words(kPairsBR * p.D);
  ws.dO2 = words(kPairsBR * p.Dv);
  ws.lse = floats(kBR);
  ws.Dd = floats(kBR);
  ws.P = floats(kBC * kBR);
  ws.dS = floats(kBC * kBR);
  ws.dcap = floats(kBC * kBR);
  ws.Pr = reinterpret_cast<uint16_t*>(words(kBC * kBR / 2));
  ws.dSr = reinterpret_cast<uint16_t*>(words(kBC * kBR / 2));
  ws.dS2 = words(kPairsBC * kBR);
  ws.K2 = words(kPairsBC * p.D);
  // Zeroed for dscores' padding columns, as in flash_backward.cpp.
  if (p.softcap > 0.0)
    std::fill(ws.dcap, ws.dcap + kBC * kBR, 0.0f);
  else
    ws.dcap = nullptr;
  return ws;
}

// Packs the panel: lse and D of its rows, q and dout in pairs along D for
// the scores, and (kv: for dK and dV) in pairs of rows.
void pack(const Ctx& c, const BackwardPanel& pn, const Workspace& ws, bool kv) {
  const AttentionProblem& p = c.p;
  const int64_t row0 = pn.row0(p);
  const uint16_t* dO = c.dO + row0 * p.Dv;  // [npos][Dv]
  const bfloat16* dO16 = reinterpret_cast<const bfloat16*>(dO);
  if (c.out_bf16)
    row_dots(dO16, static_cast<const bfloat16*>(c.O) + row0 * p.Dv, p.Dv, pn.npos, ws.Dd);
  else
    row_dots(dO16, static_cast<const float*>(c.O) + row0 * p.Dv, p.Dv, pn.npos, ws.Dd);
  for (int r = 0; r < kBR; ++r) ws.lse[r] = r < pn.npos ? c.lse[row0 + r] : -INFINITY;
  for (int r = pn.npos; r < kBR; ++r) ws.Dd[r] = 0.0f;
  const uint16_t* Q = p.q.row<uint16_t>(pn.bh(p), pn.i0);
  pack_pairs_bf16(ws.Qt2, pn.npos, p.D, [&](int r) { return Q + r * p.q.row_stride; });
  pack_pairs_bf16(ws.dOt2, pn.npos, p.Dv, [&](int r) { return dO + r * p.Dv; });
  if (kv) {
    c.dp.pack_v(ws.Q2, Q, p.q.row_stride, pn.npos, p.D);
    c.dp.pack_v(ws.dO2, dO, p.Dv, pn.npos, p.Dv);
  }
}

// The packed panel against keys [j0, j0+nj): P and dS of the tile's parts,
// then dV and dK (kv) and dQ (q) accumulate.
void step(const Ctx& c, const BackwardPanel& pn, const Workspace& ws, int64_t j0, int64_t nj,
          bool kv, bool q) {
  const AttentionProblem& p = c.p;
  const int64_t g = pn.kv(p), row0 = pn.row0(p);
  const uint16_t* K = p.k.row<uint16_t>(g, j0);  // [nj, D], rows ldk apart
  const uint16_t* V = p.v.row<uint16_t>(g, j0);  // [nj, Dv], rows ldv apart
  const int64_t ldk = p.k.row_stride, ldv = p.v.row_stride;
  const float scale = static_cast<float>(p.scale);
  // The whole tile, or where the visible range cuts it only the blocks some
  // query sees some key in (as the float32 full_step and edge_step); which
  // depends on the tile alone.
  const TileParts t = tile_is_interior(p, false, pn.b, pn.i0, pn.npos, j0, nj)
                          ? TileParts::whole(pn.npos, nj)
                          : TileParts::edge(p, pn, j0, nj, q);
  // St = scale · K·Qᵀ and dP = V·dOᵀ [nj][kBR]; the mask writes the whole tile.
  for (int x = 0; x < t.n_key; ++x) {
    const TilePart& b = t.by_key[x];
    c.dp.qk(ws.P + b.r0 * kBR + b.c0, K + b.r0 * ldk, ldk, b.nr, ws.Qt2 + b.c0, p.D, b.nc,
            scale);
    c.dp.qk(ws.dS + b.r0 * kBR + b.c0, V + b.r0 * ldv, ldv, b.nr, ws.dOt2 + b.c0, p.Dv,
            b.nc, 1.0f);
  }
  if (!tile_is_interior(p, c.elementwise, pn.b, pn.i0, pn.npos, j0, nj))
    mask_tile(p, TileRows{pn.b, pn.h, pn.i0, pn.npos, pn.npos}, j0, nj, ws.P, ws.dcap);
  // P = exp(St - lse);  dS = P ∘ (dP - D) · cap' · scale.
  for (int x = 0; x < t.n_key; ++x) {
    const TilePart& b = t.by_key[x];
    float* P = ws.P + b.r0 * kBR + b.c0;
    c.kern.probs(P, b.nr, b.nc, ws.lse + b.c0);
    const float* dcap = ws.dcap ? ws.dcap + b.r0 * kBR + b.c0 : nullptr;
    c.kern.dscores(ws.dS + b.r0 * kBR + b.c0, P, b.nr, b.nc, ws.Dd + b.c0, dcap, scale);
  }
  if (kv) {
    // dV [nj][Dv] += P [nj][npos] · dO [npos][Dv];  dK [nj][D] += dS · Q [npos][D],
    // each key row's weights in bf16 pairs of queries.
    const uint32_t* Pr = reinterpret_cast<const uint32_t*>(ws.Pr);
    const uint32_t* dSr = reinterpret_cast<const uint32_t*>(ws.dSr);
    for (int x = 0; x < t.n_key; ++x) {
      const TilePart& b = t.by_key[x];
      const int64_t at = b.r0 * kBR + b.c0, w = b.r0 * kPairsBR + b.c0 / 2, t0 = b.c0 / 2;
      c.dp.round_rows(ws.Pr + at, ws.P + at, b.nr, b.nc);
      c.dp.round_rows(ws.dSr + at, ws.dS + at, b.nr, b.nc);
      c.dp.mac_pairs(c.g.dV + (g * p.S + j0 + b.r0) * p.Dv, Pr + w, PairLayout::row_major,
                     bf16_pairs(b.nc), static_cast<int>(b.nr), ws.dO2 + t0 * p.Dv, p.Dv);
      c.dp.mac_pairs(c.g.dK + (g * p.S + j0 + b.r0) * p.D, dSr + w, PairLayout::row_major,
                     bf16_pairs(b.nc), static_cast<int>(b.nr), ws.Q2 + t0 * p.D, p.D);
    }
  }
  if (q) {
    // dQ [npos][D] += dSᵀ [npos][nj] · K [nj][D], dS in bf16 pairs of keys.
    // Packed: the keys [lo, hi) the parts read (a query block's keys lie in
    // key blocks its columns were computed for); lo is even, and an odd hi
    // is the tile's end, whose last pair gets a zero high half.
    int lo = static_cast<int>(nj), hi = 0;
    for (int x = 0; x < t.n_query; ++x) {
      lo = std::min(lo, t.by_query[x].c0);
      hi = std::max(hi, t.by_query[x].c0 + t.by_query[x].nc);
    }
    if (lo < hi) {
      c.dp.pack_p(ws.dS2 + lo / 2 * kBR, ws.dS + lo * kBR, hi - lo, pn.npos);
      c.dp.pack_v(ws.K2 + lo / 2 * p.D, K + lo * ldk, ldk, hi - lo, p.D);
    }
    for (int x = 0; x < t.n_query; ++x) {
      const TilePart& b = t.by_query[x];
      const int64_t t0 = b.c0 / 2;
      c.dp.mac_pairs(c.g.dQ + (row0 + b.r0) * p.D, ws.dS2 + t0 * kBR + b.r0,
                     PairLayout::pair_major, bf16_pairs(b.nc), static_cast<int>(b.nr),
                     ws.K2 + t0 * p.D, p.D);
    }
  }
}

// The bf16 tiles backward_schedule.h runs. Scores always take qk_bf16's
// tile form, also for panels of up to kRowsForQkRows positions, which the
// forward scores by rows (qk_rows_bf16; or on AMX tiles): those few rows
// are not worth a second set of products here, and P is recomputed from lse
// either way, so it differs from the forward's weights only by float32
// rounding of the scores (the float32 backward matches its forward's form
// because it can at no cost).
struct Bf16Tiles {
  using Workspace = kernels::Workspace;
  const Ctx& c;
  size_t scratch_floats() const { return workspace_floats(c.p); }
  Workspace workspace(float* slot) const { return make_workspace(c.p, slot); }
  bool by_rows(int) const { return false; }
  void pack(const BackwardPanel& pn, const Workspace& ws, bool kv) const {
    kernels::pack(c, pn, ws, kv);
  }
  void step(const BackwardPanel& pn, const Workspace& ws, int64_t j0, int64_t nj, bool kv,
            bool q) const {
    kernels::step(c, pn, ws, j0, nj, kv, q);
  }
};

}  // namespace

void flash_backward_bf16(AttentionGrads& g, const AttentionProblem& p, const BackwardInputs& in,
                         int threads, const IsaKernels& isa) {
  if (!isa.flash_bf16)
    throw Error(std::string("flash_backward_bf16: needs AVX512-BF16, the path is ") +
                isa_name(isa.isa));
  const Ctx c{p,
              *isa.flash,
              *isa.flash_bf16,
              static_cast<const uint16_t*>(in.dout),
              in.out,
              in.out_bf16,
              static_cast<const float*>(in.lse),
              BackwardGrads{g.dq.data<float>(), g.dk.data<float>(), g.dv.data<float>()},
              needs_elementwise(p)};
  run_backward(p, Bf16Tiles{c}, c.g, threads);
}

}  // namespace qkv::kernels
