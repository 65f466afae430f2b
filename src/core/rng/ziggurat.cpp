// Generator.standard_normal() / normal(): NumPy's 256-bin ziggurat, bit for bit
// (random_standard_normal in numpy/random/src/distributions/distributions.c).
//
// Marsaglia & Tsang's ziggurat covers the half density f(x) = exp(-x^2/2)
// with 256 pieces of equal area v: bin 0 is the base strip [0, r] plus the
// tail beyond r, bin i (1..255) the rectangle under f(x_i) out to x_i, with
// 0 < x_1 < ... < x_255 = r. One 64-bit draw gives the bin (8 bits), a sign
// bit and a 52-bit magnitude; about 99% of draws fall inside the part of
// their rectangle that lies wholly under f and return after one multiply.
//
// NumPy ships the tables (ki, wi, fi) as literals; we rebuild them once at
// first use with Marsaglia & Tsang's recurrence, which lands on NumPy's
// doubles exactly given the two adjustments documented in build_tables().
#include "qkv/rng.h"

#include <cmath>

namespace qkv {
namespace {

constexpr int kBins = 256;
// Right edge of the base strip, and 1/r as a double (as NumPy spells both).
constexpr double kR = 3.6541528853610088;
constexpr double kInvR = 1.0 / kR;
// Area of each piece. The exact r f(r) + integral_r^inf f is 0.00492867323397465493;
// NumPy's tables were built from this double, 4 ulps lower. It is pinned by
// wi[0] = v / f(r) / 2^52, which NumPy's outputs determine exactly, and no
// other double within 3000 ulps reproduces NumPy's wi[38..255].
constexpr double kV = 0.004928673233974652;
constexpr double kTwo52 = 4503599627370496.0;  // the magnitude has 52 bits

struct ZigguratTables {
  uint64_t ki[kBins];  // accept without the density test if magnitude < ki[i]
  double wi[kBins];    // magnitude -> x: x_i / 2^52 (bin 0: v / f(r) / 2^52)
  double fi[kBins];    // f(x_i); fi[0] = f(0) = 1
};

double density(double x) { return std::exp(-0.5 * x * x); }

ZigguratTables build_tables() {
  ZigguratTables t{};
  // Bin 0 is sampled as a rectangle of width q = v / f(r) and height f(r):
  // the part beyond r stands for the tail, handled apart.
  const double q = kV / density(kR);
  t.ki[0] = static_cast<uint64_t>(kR / q * kTwo52);
  t.wi[0] = q / kTwo52;
  t.fi[0] = 1.0;
  t.ki[1] = 0;  // x_0 = 0: the top bin has no part wholly under f
  t.wi[kBins - 1] = kR / kTwo52;
  t.fi[kBins - 1] = density(kR);

  // Each piece has area v, so f(x_{i-1}) = f(x_i) + v / x_i. Walk down from r
  // in plain double arithmetic, as NumPy's tables were made: with glibc's
  // exp/log this gives NumPy's wi[38..255] exactly, while walks in long double
  // or quad precision do not reproduce them.
  double x = kR;
  for (int i = kBins - 2; i >= 1; --i) {
    const double next = std::sqrt(-2.0 * std::log(kV / x + t.fi[i + 1]));
    t.ki[i + 1] = static_cast<uint64_t>(next / x * kTwo52);
    x = next;
    t.fi[i] = density(x);
    // Whatever built NumPy's tables evidently got f(x_38) (x_38 =
    // 0.8826222295851650) one ulp above the correctly rounded exp() that
    // glibc returns, i.e. its libm erred by 0.60 ulp there; this is the only
    // step of the walk that does not match. It feeds x_37 and so x_1..x_37:
    // without it wi[1..37] differ by up to 22 ulps and every draw landing in
    // bins 1..37 (about 14%) differs from NumPy; with it 2,000,000 draws
    // from default_rng(42) match exactly.
    if (i == 38) t.fi[i] = std::nextafter(t.fi[i], 2.0);
    t.wi[i] = x / kTwo52;
  }
  return t;
}

const ZigguratTables& tables() {
  static const ZigguratTables t = build_tables();  // thread-safe, built once
  return t;
}

}  // namespace

double NumpyGenerator::standard_normal() {
  const ZigguratTables& t = tables();
  for (;;) {
    uint64_t r = next_uint64();
    const int idx = static_cast<int>(r & 0xff);
    r >>= 8;
    const bool negative = r & 1;
    const uint64_t rabs = (r >> 1) & 0x000fffffffffffffULL;
    double x = static_cast<double>(rabs) * t.wi[idx];
    if (negative) x = -x;
    if (rabs < t.ki[idx]) return x;

    if (idx == 0) {
      // The tail beyond r, by Marsaglia's exponential rejection. NumPy uses
      // log1p(-U) (i.e. log(1 - U)) so that U = 0 cannot give log(0), and
      // takes the sign from bit 8 of the magnitude, not the sign bit above.
      for (;;) {
        const double xx = -kInvR * std::log1p(-random());
        const double yy = -std::log1p(-random());
        if (yy + yy > xx * xx) return ((rabs >> 8) & 1) ? -(kR + xx) : kR + xx;
      }
    }
    // The wedge between the rectangle and f: accept if a uniform height in
    // [f(x_i), f(x_{i-1})) lies under f(x); otherwise draw again from scratch.
    if ((t.fi[idx - 1] - t.fi[idx]) * random() + t.fi[idx] < density(x)) return x;
  }
}

double NumpyGenerator::normal(double loc, double scale) {
  return loc + scale * standard_normal();
}

void NumpyGenerator::normal(double* out, size_t n, double loc, double scale) {
  for (size_t i = 0; i < n; ++i) out[i] = normal(loc, scale);
}

}  // namespace qkv
