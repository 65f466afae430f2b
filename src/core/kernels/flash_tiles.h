// flash_tiles.h: which keys a tile of query rows may see, and the element-wise
// part of a score tile (soft-cap, ALiBi, masks). Shared by the forward
// (flash_block.cpp) and the backward (flash_backward.cpp), so both passes
// see exactly the same scores.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/attention_problem.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

// N <= kDecodeRows takes the forward's split-KV decode path.
constexpr int64_t kDecodeRows = 16;
// Panels of at most this many rows compute scores with qk_rows (vectors
// along D) rather than qk.
constexpr int kRowsForQkRows = 4;

// Whether the forward stacks each GQA group into one panel of group x N rows
// (decode's few positions, when the group's rows fit a tile) instead of one
// panel per head. Every block then covers all N positions.
inline bool stacks_group(const AttentionProblem& p) {
  return p.N <= kDecodeRows && p.group * p.N <= kBR;
}

// Whether the forward computed the scores of its block of positions
// [i0, i0+npos) with qk_rows: a stacked panel has group x N rows, any other
// npos rows. The two kernels sum a dot product in different orders; the
// backward recomputes each score with the kernel the forward used, so
// exp(s - lse) sees the very scores that made lse (a row with one visible
// key gets P = 1 exactly).
inline bool forward_scores_by_rows(const AttentionProblem& p, int64_t npos) {
  return (stacks_group(p) ? p.group * p.N : npos) <= kRowsForQkRows;
}

// The query rows of a score tile St [nj][kBR]: column r is query head
// h0 + r / npos at position i0 + r % npos of batch element b (a stacked
// decode panel spans several heads; every other tile one head, rows = npos).
struct TileRows {
  int64_t b, h0, i0;
  int npos, rows;
};

// True when mask, ALiBi or soft-cap touch every score, so no tile may skip
// the element-wise pass.
inline bool needs_elementwise(const AttentionProblem& p) {
  return p.mask.present() || p.alibi_slopes != nullptr || p.softcap > 0.0;
}

// The keys [first, end) any of positions [i0, i0+npos) may see (first_key
// and last_key both rise with the position), clipped to [kbeg, kend); empty
// when first >= end.
inline void visible_keys(const AttentionProblem& p, int64_t b, int64_t i0, int64_t npos,
                         int64_t kbeg, int64_t kend, int64_t& first, int64_t& end) {
  first = std::max(kbeg, p.first_key(i0));
  end = std::min(kend, p.last_key(b, i0 + npos - 1) + 1);
}

// True when every one of positions [i0, i0+npos) sees every key of
// [j0, j0+nj) and nothing element-wise applies: the tile needs no mask_tile.
inline bool tile_is_interior(const AttentionProblem& p, bool elementwise, int64_t b, int64_t i0,
                             int64_t npos, int64_t j0, int64_t nj) {
  return !elementwise && p.first_key(i0 + npos - 1) <= j0 && j0 + nj - 1 <= p.last_key(b, i0);
}

// Applies soft-capping, ALiBi, the masks and the visible key range to the
// scaled score tile St [nj][kBR] of `t`, keys [j0, j0+nj): hidden scores
// become -inf. With dcap [nj][kBR] (the backward), also writes the cap's
// derivative d cap(x)/dx = 1 - tanh²(x/c) at each visible score (1 without
// soft-cap, 0 where hidden; columns >= t.rows untouched).
void mask_tile(const AttentionProblem& p, const TileRows& t, int64_t j0, int64_t nj, float* St,
               float* dcap = nullptr);

}  // namespace qkv::kernels
