// The K-quants' reference quantizers, the same search ggml's
// quantize_row_q{4,5,6}_K_ref makes (no importance matrix), so that a file
// qkv writes holds the blocks llama-quantize writes from the same floats.
// Each sub-block's integers and scale are chosen by a small search that
// minimises a weighted squared error; then the super-block's scales are
// themselves quantized (6 bits for Q4_K/Q5_K, int8 for Q6_K) and the
// integers chosen again against the scales as stored. Layouts: quant_k.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "linalg/half.h"
#include "linalg/k_scales.h"
#include "linalg/rows.h"

namespace qkv::linalg {
namespace {

// v rounded to the nearest integer, ties to even (the default rounding
// mode, as ggml's magic-number rounding does for |v| < 2^22); clamped to
// [lo, hi]. NaN cannot reach here: a model's weights are checked finite.
int round_clamp(float v, int lo, int hi) {
  const float r = std::nearbyint(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi)));
  return static_cast<int>(r);
}

// One sub-block of n weights x as q in 0..nmax with x ~ scale * q - min
// (min >= 0 is returned in *min_out): first from the plain range, then
// nstep + 1 candidate steps (nmax + rmin + rdelta * is) / range, each
// followed by the weighted least-squares scale and min for its integers;
// the candidate of least weighted squared error wins. A range that does
// not reach below 0 is widened to start at 0 (the min is never negative).
// As in ggml, a winning candidate's offset becomes the bottom of the range
// the later candidates are drawn from (lo moves): the blocks then match.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* q, float* min_out, float rmin,
                    float rdelta, int nstep) {
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi == lo) {
    std::fill(q, q + n, uint8_t{0});
    *min_out = -lo;
    return 0.0f;
  }
  float inv = static_cast<float>(nmax) / (hi - lo), scale = 1 / inv, best = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(round_clamp(inv * (x[i] - lo), 0, nmax));
    const float diff = scale * q[i] + lo - x[i];
    best += w[i] * (diff * diff);
  }
  uint8_t trial[32];
  for (int is = 0; is <= nstep; ++is) {
    inv = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = round_clamp(inv * (x[i] - lo), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * static_cast<float>(l);
      sum_l2 += w[i] * static_cast<float>(l) * static_cast<float>(l);
      sum_xl += w[i] * static_cast<float>(l) * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float s = (sum_w * sum_xl - sum_x * sum_l) / det, m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (m > 0) {  // the fit wants a positive offset: pin it to 0, refit the scale alone
      m = 0;
      s = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = s * trial[i] + m - x[i];
      err += w[i] * (diff * diff);
    }
    if (err < best) {
      std::memcpy(q, trial, static_cast<size_t>(n));
      best = err;
      scale = s;
      lo = m;
    }
  }
  *min_out = -lo;
  return scale;
}

// Q4_K and Q5_K share everything but the integers' range (nmax 15 or 31)
// and the search's first step: per 32-weight sub-block a scale and a min
// (weighted by rms + |x|, which favours the large weights), then both sets
// quantized to 6 bits against their largest (d = max scale / 63, dmin = max
// min / 63) and the integers re-chosen against the stored scales. Writes
// the f16 d and dmin to out[0..4), the 12 scale bytes to out[4..16), and
// the 256 integers to q.
void quantize_k_scales(const float* x, int nmax, float rmin, int nstep, uint8_t* out, uint8_t* q) {
  float scales[8], mins[8], w[32], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, q + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* s = out + 4;
  std::memset(s, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int sc = round_clamp(inv_scale * scales[j], 0, 63), m = round_clamp(inv_min * mins[j], 0, 63);
    if (j < 4) {  // the layout of linalg/k_scales.h
      s[j] = static_cast<uint8_t>(sc);
      s[j + 4] = static_cast<uint8_t>(m);
    } else {
      s[j + 4] = static_cast<uint8_t>((sc & 15) | (m & 15) << 4);
      s[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
      s[j] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
  put_f16(out, half_from_float(max_scale / 63.0f));
  put_f16(out + 2, half_from_float(max_min / 63.0f));
  const float d = f16_at(out), dmin = f16_at(out + 2);
  for (int j = 0; j < 8; ++j) {
    const ScaleMin sm = scale_min(s, j);
    const float dj = d * static_cast<float>(sm.sc);
    if (dj == 0.0f) continue;
    const float mj = dmin * static_cast<float>(sm.m);
    for (int l = 0; l < 32; ++l) q[32 * j + l] = static_cast<uint8_t>(round_clamp((x[32 * j + l] + mj) / dj, 0, nmax));
  }
}

}  // namespace

void quantize_q4_k(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  uint8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i, b += 144, x += 256) {
    quantize_k_scales(x, 15, -1.0f, 20, b, q);
    for (int c = 0; c < 4; ++c)  // chunk c: sub-block 2c low, 2c + 1 high
      for (int l = 0; l < 32; ++l) b[16 + 32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | q[64 * c + 32 + l] << 4);
  }
}

void quantize_q5_k(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  uint8_t q[256];
  for (int64_t i = 0; i < n / 256; ++i, b += 176, x += 256) {
    quantize_k_scales(x, 31, -0.5f, 15, b, q);
    uint8_t *qh = b + 16, *qs = b + 48;
    std::memset(qh, 0, 32);
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) qh[l] |= static_cast<uint8_t>((q[32 * j + l] >> 4) << j);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 15) | (q[64 * c + 32 + l] & 15) << 4);
  }
}

namespace {

// One 16-weight sub-block of Q6_K as l in -32..31 with x ~ scale * l: the
// step from the largest-magnitude weight (which maps to -32), then 18 steps
// around it (nmax + 0.1 is, is = -9..9), keeping the one whose least-squares
// scale (weights x^2) explains the most of x. Returns the signed scale.
float fit_symmetric(const float* x, int8_t* l_out) {
  constexpr int nmax = 32, n = 16;
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax < 1e-15f) {
    std::fill(l_out, l_out + n, int8_t{0});
    return 0.0f;
  }
  auto fit = [&](float inv, float& sum_lx, float& sum_l2, int8_t* l) {
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int li = round_clamp(inv * x[i], -nmax, nmax - 1);
      if (l) l[i] = static_cast<int8_t>(li);
      const float wi = x[i] * x[i];
      sum_lx += wi * x[i] * static_cast<float>(li);
      sum_l2 += wi * static_cast<float>(li) * static_cast<float>(li);
    }
  };
  float sum_lx, sum_l2;
  fit(-nmax / max, sum_lx, sum_l2, l_out);
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f, best = scale * sum_lx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float inv = -(nmax + 0.1f * static_cast<float>(is)) / max;
    fit(inv, sum_lx, sum_l2, nullptr);
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      fit(inv, sum_lx, sum_l2, l_out);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace

// Q6_K: 16 signed scales, quantized to int8 against the one of largest
// magnitude (which becomes -128, d = its scale / -128), then the integers
// re-chosen against the stored scales. A block of zeros is all zero bytes.
void quantize_q6_k(const float* x, void* blocks, int64_t n) {
  auto* b = static_cast<uint8_t*>(blocks);
  int8_t l[256];
  float scales[16];
  for (int64_t i = 0; i < n / 256; ++i, b += 210, x += 256) {
    float max_scale = 0, max_abs = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_symmetric(x + 16 * s, l + 16 * s);
      if (std::fabs(scales[s]) > max_abs) {
        max_abs = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    std::memset(b, 0, 210);
    if (max_abs < 1e-15f) continue;
    const float inv = -128.0f / max_scale;
    put_f16(b + 208, half_from_float(1 / inv));
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    for (int s = 0; s < 16; ++s) sc[s] = static_cast<int8_t>(round_clamp(inv * scales[s], -128, 127));
    const float d = f16_at(b + 208);
    for (int s = 0; s < 16; ++s) {
      const float ds = d * static_cast<float>(sc[s]);
      if (ds == 0.0f) continue;
      for (int k = 0; k < 16; ++k) l[16 * s + k] = static_cast<int8_t>(round_clamp(x[16 * s + k] / ds, -32, 31));
    }
    // Stored as q = l + 32 in 0..63, split as quant_k.cpp draws it.
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 32; ++j) {
          const int w = 128 * h + 32 * k + j, q = l[w] + 32;
          b[64 * h + j + 32 * (k % 2)] |= static_cast<uint8_t>((q & 15) << (k < 2 ? 0 : 4));
          b[128 + 32 * h + j] |= static_cast<uint8_t>((q >> 4) << (2 * k));
        }
  }
}

}  // namespace qkv::linalg
