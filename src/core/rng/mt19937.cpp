// np.random.seed(seed) + np.random.random_sample / randn: the legacy
// RandomState stream (MT19937, legacy_double and legacy_gauss in
// numpy/random/src/legacy/legacy-distributions.c).
//
// NumPy froze RandomState's algorithms for reproducibility, so old lessons
// that call np.random.seed(0); np.random.randn(...) still print the same
// numbers; matching them needs this exact method, not any normal sampler.
#include "qkv/rng.h"

#include <cmath>

namespace qkv {

NumpyRandomState::NumpyRandomState(uint32_t seed) : mt_(seed) {}

uint32_t NumpyRandomState::next_uint32() { return static_cast<uint32_t>(mt_()); }

double NumpyRandomState::random_sample() {
  // 27 high bits of one output and 26 of the next form a 53-bit integer.
  const uint32_t a = next_uint32() >> 5;
  const uint32_t b = next_uint32() >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;  // (a * 2^26 + b) / 2^53
}

double NumpyRandomState::randn() {
  if (has_gauss_) {
    has_gauss_ = false;
    return gauss_;
  }
  // Marsaglia's polar method: a uniform point in the unit disc (not the
  // origin) yields two independent normals; return one, keep the other.
  double x1, x2, r2;
  do {
    x1 = 2.0 * random_sample() - 1.0;
    x2 = 2.0 * random_sample() - 1.0;
    r2 = x1 * x1 + x2 * x2;
  } while (r2 >= 1.0 || r2 == 0.0);
  const double f = std::sqrt(-2.0 * std::log(r2) / r2);
  gauss_ = f * x1;
  has_gauss_ = true;
  return f * x2;
}

void NumpyRandomState::randn(double* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = randn();
}

}  // namespace qkv
