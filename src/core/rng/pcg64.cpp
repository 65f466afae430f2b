// PCG64 seeded like np.random.default_rng(seed), and Generator.random().
//
// default_rng(seed) does not use the seed as the state: it builds
// SeedSequence(entropy=seed), asks it for four 64-bit words and hands those to
// PCG64. Reproducing NumPy's stream therefore needs SeedSequence's hash too
// (numpy/random/bit_generator.pyx) and PCG64's set-seed (numpy's pcg64.h).
#include "qkv/rng.h"

#include <array>

#include "qkv/error.h"

namespace qkv {
namespace {

// SeedSequence's constants (bit_generator.pyx), all 32-bit arithmetic.
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;     // half of 32 bits
constexpr int kPoolSize = 4;    // SeedSequence's default pool_size

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> kXShift);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> kXShift);
}

// SeedSequence(entropy=seed).generate_state(4, np.uint64), no spawn key;
// `entropy` is the seed's 32-bit words, least significant first.
std::array<uint64_t, 4> seed_sequence_state(std::span<const uint32_t> entropy) {
  const size_t n_entropy = entropy.size();

  // mix_entropy: hash each word into the pool (zeros past the entropy), then
  // mix every pool word into every other one, then the words past the pool
  // into every pool word.
  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(static_cast<size_t>(i) < n_entropy ? entropy[i] : 0u, hash_const);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (size_t src = kPoolSize; src < n_entropy; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src], hash_const));

  // generate_state: eight 32-bit words cycling over the pool, then viewed as
  // four little-endian uint64 (low word first).
  uint32_t words[8];
  uint32_t hash_b = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPoolSize] ^ hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    words[i] = v ^ (v >> kXShift);
  }
  std::array<uint64_t, 4> out{};
  for (int i = 0; i < 4; ++i) out[i] = words[2 * i] | (static_cast<uint64_t>(words[2 * i + 1]) << 32);
  return out;
}

}  // namespace

// NumPy splits the int into 32-bit words, least significant first; 0 is [0].
NumpyGenerator::NumpyGenerator(uint64_t seed)
    : NumpyGenerator(std::span<const uint32_t>(
          std::array<uint32_t, 2>{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}.data(),
          (seed >> 32) ? 2 : 1)) {}

NumpyGenerator::NumpyGenerator(std::span<const uint32_t> seed_words) {
  if (seed_words.empty()) throw Error("NumpyGenerator: a seed needs at least one 32-bit word");
  // pcg64_set_seed: words 0,1 are the initial state (high, low) and words 2,3
  // the stream selector; then pcg_setseq_128_srandom_r.
  const std::array<uint64_t, 4> w = seed_sequence_state(seed_words);
  const u128 initstate = (static_cast<u128>(w[0]) << 64) | w[1];
  const u128 initseq = (static_cast<u128>(w[2]) << 64) | w[3];
  state_ = 0;
  inc_ = (initseq << 1) | 1u;
  next_uint64();
  state_ += initstate;
  next_uint64();
}

uint64_t NumpyGenerator::next_uint64() {
  // PCG's default 128-bit LCG multiplier.
  const u128 kMult = (static_cast<u128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;
  // NumPy steps first and then outputs from the new state.
  state_ = state_ * kMult + inc_;
  // XSL-RR: xor the halves, rotate right by the top 6 bits.
  const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64u - rot) & 63u));
}

double NumpyGenerator::random() {
  return static_cast<double>(next_uint64() >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace qkv
