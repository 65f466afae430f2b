// flash_forward.cpp: the tiled, threaded forward: which driver runs, and
// the prefill and weights-pass drivers (decode: flash_decode.cpp; the
// block all three run: flash_block.h).
//
// Prefill splits the work into blocks of up to kBR query rows of one batch
// element and one key/value head g, covering all query heads of g's GQA
// group. A block walks its visible keys in tiles of kBC with the online
// softmax (running max m, running sum l, accumulator O rescaled by alpha),
// so no N x S matrix exists. Decode (N <= kDecodeRows) cuts S into chunks
// instead and merges their partials. bf16 inputs accumulate in float32; a
// bf16 output is rounded once per element, as it is written (OutRows).
#include "core/kernels/flash_forward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_block.h"
#include "core/runtime/interrupt.h"

namespace qkv::kernels {
namespace fwd {
namespace {

// out = O / l and lse = m + log l for the block's rows; 0 and -inf for a row
// that saw no key.
void finalize(const Ctx& c, const Block& blk, const Workspace& ws, const OutRows& out,
              float* lse) {
  const AttentionProblem& p = c.p;
  for (const Panel& pn : ws.panels)
    for (int r = 0; r < pn.rows(); ++r) {
      const int64_t row = out_row(p, blk, pn, r);
      const float l = pn.l[r];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      if (uses_amx(c, pn))  // Ot [Dv][kBR]
        for (int64_t e = 0; e < p.Dv; ++e) out.put(row * p.Dv + e, pn.O[e * kBR + r] * inv);
      else
        for (int64_t e = 0; e < p.Dv; ++e) out.put(row * p.Dv + e, pn.O[r * p.Dv + e] * inv);
      if (lse) lse[row] = l > 0.0f ? pn.m[r] + std::log(l) : -INFINITY;
    }
}

// Query tiles of every (batch, key/value head), last tiles first: under a
// causal mask they see the most keys, so scheduling them early balances
// the threads. `body` runs once per block on some thread; an interrupt
// skips the blocks not yet begun (core/runtime/interrupt.h).
template <class Body>
void for_each_query_block(const AttentionProblem& p, int threads, Body body) {
  const int64_t n_qt = (p.N + kBR - 1) / kBR;
  const int64_t items = p.B * p.Hkv * n_qt;
  Interrupt interrupt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t it = 0; it < items; ++it) {
    if (interrupt.stop()) continue;
    const int64_t qt = n_qt - 1 - it % n_qt, bg = it / n_qt;
    Block blk{bg / p.Hkv, bg % p.Hkv, qt * kBR, 0, 0, p.S};
    blk.npos = static_cast<int>(std::min<int64_t>(kBR, p.N - blk.i0));
    body(blk);
  }
  interrupt.throw_if_stopped();
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
const uint32_t* pack_all_v_pairs(const FlashBf16Kernels& dp, const AttentionProblem& p,
                                 int threads) {
  const int64_t pairs = bf16_pairs(p.S);
  const size_t words = static_cast<size_t>(p.B * p.Hkv * pairs * p.Dv);
  uint32_t* v2 = reinterpret_cast<uint32_t*>(caller_scratch(words));
  for_each_v_tile(p, threads, [&](int64_t bg, int64_t j0, int64_t nj) {
    dp.pack_v(v2 + (bg * pairs + j0 / 2) * p.Dv, p.v.row<uint16_t>(bg, j0),
              p.v.row_stride, nj, p.Dv);
  });
  return v2;
}

// Every (batch, key/value head)'s V transposed, [B * Hkv][Dv][vt_row_stride(S)]
// bf16 in the caller's scratch: the A tiles of the AMX P·V, once per head
// even when N <= kBR (each tile of V would be transposed once there anyway).
const uint16_t* pack_all_vt(const FlashAmxKernels& amx, const AttentionProblem& p, int threads) {
  const int64_t ldt = vt_row_stride(p.S);
  const size_t halves = static_cast<size_t>(p.B * p.Hkv * p.Dv * ldt);
  uint16_t* vt = reinterpret_cast<uint16_t*>(caller_scratch((halves + 1) / 2));
  for_each_v_tile(p, threads, [&](int64_t bg, int64_t j0, int64_t nj) {
    amx.pack_vt(vt + bg * p.Dv * ldt + j0, ldt, p.v.row<uint16_t>(bg, j0), p.v.row_stride, nj,
                p.Dv);
  });
  return vt;
}

void prefill(const Ctx& ctx, const OutRows& out, float* lse, int threads) {
  Ctx c = ctx;
  if (c.amx) {
    c.v_cols = pack_all_vt(*c.amx, c.p, threads);
  } else if (c.dp && c.p.N > kBR) {
    // With one query block per head each V tile is packed once anyway.
    c.v_pairs = pack_all_v_pairs(*c.dp, c.p, threads);
  }
  TeamWorkspaces team(c.p, threads);
  for_each_query_block(c.p, threads, [&](const Block& blk) {
    Workspace& ws = team.mine();
    make_workspace(c.p, blk, team.scratch.slot(), ws);
    run_block(c, blk, ws);
    finalize(c, blk, ws, out, lse);
  });
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
}  // namespace fwd

void flash_forward(AttentionResult& res, const AttentionProblem& p, bool want_weights,
                   bool want_lse, int threads, const IsaKernels& isa) {
  using namespace fwd;
  const bool bf16 = p.dtype == DType::bf16;
  Ctx c{p, *isa.flash, needs_elementwise(p), bf16, bf16 ? isa.flash_bf16 : nullptr};
  if (bf16 && amx_shape_ok(p.D, p.Dv) && p.N > kDecodeRows) c.amx = isa.flash_amx;
  // The weights pass needs each row's lse even when the caller does not.
  std::vector<float> own_lse;
  float* lse = want_lse ? res.lse.data<float>() : nullptr;
  if (want_weights && !lse) {
    own_lse.resize(static_cast<size_t>(p.B * p.Hq * p.N));
    lse = own_lse.data();
  }
  // A bf16 out is accumulated in float32 and rounded once, as it is written.
  OutRows out;
  if (res.out.dtype() == DType::bf16)
    out.b16 = res.out.data<bfloat16>();
  else
    out.f32 = res.out.data<float>();
  if (p.N <= kDecodeRows)
    decode(c, out, lse, threads);
  else
    prefill(c, out, lse, threads);
  if (want_weights) weights_pass(c, lse, res.weights.data<float>(), threads);
}

}  // namespace qkv::kernels
