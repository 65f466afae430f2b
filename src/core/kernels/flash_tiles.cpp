#include "core/kernels/flash_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace qkv::kernels {
namespace {

// How one mask element acts on a score: each type's apply() is the whole
// per-score mask work, so the loop below is compiled once per mask type and
// the type is chosen once per tile, not per score.
struct NoMask {
  void apply(float&, int64_t) const {}
};
struct KeepMask {  // bool mask: false hides the key
  const bool* keep;
  void apply(float& s, int64_t m) const {
    if (!keep[m]) s = -INFINITY;
  }
};
template <class T>
struct AddMask {  // additive mask, float32 or float64
  const T* add;
  void apply(float& s, int64_t m) const { s += static_cast<float>(add[m]); }
};

// mask_tile's loop for one mask type M.
template <class M>
void mask_rows(const AttentionProblem& p, const TileRows& t, int64_t j0, int64_t nj, float* St,
               float* dcap, const M& mask) {
  const float cap = static_cast<float>(p.softcap);
  for (int r = 0; r < t.rows; ++r) {
    const int64_t h = t.h0 + r / t.npos, i = t.i0 + r % t.npos;
    const int64_t first = p.first_key(i), last = p.last_key(t.b, i);
    // Without a mask head_offset is empty; mrow is then never used.
    const int64_t mrow = p.mask.head_offset.empty()
                             ? 0
                             : p.mask.head_offset[t.b * p.Hq + h] + i * p.mask.stride_n;
    for (int64_t jj = 0; jj < nj; ++jj) {
      const int64_t j = j0 + jj;
      float& s = St[jj * kBR + r];
      if (j < first || j > last) {
        s = -INFINITY;
        if (dcap) dcap[jj * kBR + r] = 0.0f;
        continue;
      }
      if (cap > 0.0f) {
        const float th = std::tanh(s / cap);
        s = cap * th;
        if (dcap) dcap[jj * kBR + r] = 1.0f - th * th;
      } else if (dcap) {
        dcap[jj * kBR + r] = 1.0f;
      }
      if (p.alibi_slopes) s += static_cast<float>(p.alibi(h, i, j));
      mask.apply(s, mrow + j * p.mask.stride_s);
    }
  }
}

// mask_tile when only the visible key range applies (no mask, ALiBi or
// soft-cap: causal or windowed attention, padding): per key, the rows that
// cannot see it are hidden. Rows are St's contiguous axis, so these loops
// vectorise where mask_rows' per-score loop cannot (it cost 3% of a
// training step).
void bounds_only(const AttentionProblem& p, const TileRows& t, int64_t j0, int64_t nj, float* St,
                 float* dcap) {
  // Row r sees the tile's keys [lo[r], hi[r]) (offsets from j0, clipped to
  // [0, nj]); 32-bit, so the stacked panel's comparisons below vectorise on
  // any x86-64 (SSE2 has no 64-bit compare).
  int32_t lo[kBR], hi[kBR];
  for (int r = 0; r < t.rows; ++r) {
    const int64_t i = t.i0 + r % t.npos;
    lo[r] = static_cast<int32_t>(std::clamp<int64_t>(p.first_key(i) - j0, 0, nj));
    hi[r] = static_cast<int32_t>(std::clamp<int64_t>(p.last_key(t.b, i) + 1 - j0, 0, nj));
  }
  if (t.rows != t.npos) {  // a stacked decode panel: several heads' rows
    for (int32_t jj = 0; jj < nj; ++jj) {
      float* s = St + jj * kBR;
      for (int r = 0; r < t.rows; ++r) s[r] = jj < lo[r] || jj >= hi[r] ? -INFINITY : s[r];
      if (!dcap) continue;
      float* d = dcap + jj * kBR;
      for (int r = 0; r < t.rows; ++r) d[r] = jj < lo[r] || jj >= hi[r] ? 0.0f : 1.0f;
    }
    return;
  }
  // One head's rows: lo and hi rise with r (first_key and last_key rise
  // with the position), so the rows that see key jj are one run [a, b):
  // fill what lies outside it, with no per-score test.
  int a = 0, b = 0;
  for (int32_t jj = 0; jj < nj; ++jj) {
    while (a < t.rows && hi[a] <= jj) ++a;  // rows before a end before jj
    while (b < t.rows && lo[b] <= jj) ++b;  // rows from b start after jj
    const int e = std::max(a, b);
    float* s = St + jj * kBR;
    std::fill(s, s + a, -INFINITY);
    std::fill(s + e, s + t.rows, -INFINITY);
    if (!dcap) continue;
    float* d = dcap + jj * kBR;
    std::fill(d, d + a, 0.0f);
    std::fill(d + a, d + e, 1.0f);
    std::fill(d + e, d + t.rows, 0.0f);
  }
}

}  // namespace

void mask_tile(const AttentionProblem& p, const TileRows& t, int64_t j0, int64_t nj, float* St,
               float* dcap) {
  if (!needs_elementwise(p)) return bounds_only(p, t, j0, nj, St, dcap);
  const MaskView& m = p.mask;
  if (m.keep)
    mask_rows(p, t, j0, nj, St, dcap, KeepMask{m.keep});
  else if (m.add_f32)
    mask_rows(p, t, j0, nj, St, dcap, AddMask<float>{m.add_f32});
  else if (m.add_f64)
    mask_rows(p, t, j0, nj, St, dcap, AddMask<double>{m.add_f64});
  else
    mask_rows(p, t, j0, nj, St, dcap, NoMask{});
}

}  // namespace qkv::kernels
