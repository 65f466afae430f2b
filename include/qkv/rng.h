/// @file
/// qkv/rng.h: random generators that reproduce NumPy's streams bit for bit.
///
/// `qkv demo` replays a NumPy lesson and must print the lesson's numbers, so
/// "a normal generator" is not enough: these match NumPy's algorithms, seeding
/// and call order exactly (verified in tests/test_rng.cpp against NumPy 2.x).
///
///   NumpyGenerator(seed)    == np.random.default_rng(seed)
///                              (PCG64 seeded through SeedSequence, 256-bin ziggurat)
///   NumpyRandomState(seed)  == np.random.seed(seed) / np.random.RandomState(seed)
///                              (MT19937 and the legacy polar Box-Muller gauss)
///
/// Neither is thread-safe; give each thread its own generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "qkv/export.h"

namespace qkv {

/// NumPy's default_rng(seed) (PCG64), bit for bit, so a seed gives the
/// lessons' and nanoGPT's numbers.
class QKV_API NumpyGenerator {
 public:
  /// Any seed NumPy accepts as a single non-negative Python int below 2^64.
  explicit NumpyGenerator(uint64_t seed);
  /// A seed of any size: its 32-bit words, least significant first, as
  /// SeedSequence splits a Python int (2**100 is {0, 0, 0, 16}); at least one.
  explicit NumpyGenerator(std::span<const uint32_t> seed_words);

  /// Generator.bit_generator.random_raw(): one PCG64 (XSL-RR 128/64) output.
  uint64_t next_uint64();
  /// Generator.random(): 53 random bits scaled into [0, 1).
  double random();
  /// Generator.standard_normal(): NumPy's 256-bin ziggurat (not the legacy gauss).
  double standard_normal();
  /// Generator.normal(loc, scale): loc + scale * standard_normal().
  double normal(double loc, double scale);
  /// Generator.normal(loc, scale, size=...): fills out[0..n) in NumPy's C order,
  /// so an (r, c) array is out[i * c + j].
  void normal(double* out, size_t n, double loc = 0.0, double scale = 1.0);

 private:
  /// __extension__ keeps -Wpedantic quiet about the GCC/Clang 128-bit type
  /// that PCG64's state needs.
  __extension__ typedef unsigned __int128 u128;
  u128 state_ = 0;
  u128 inc_ = 0;  ///< odd; fixed by the seed
};

/// NumPy's legacy np.random.RandomState (MT19937), bit for bit.
class QKV_API NumpyRandomState {
 public:
  /// np.random.seed(seed) for an int seed in [0, 2^32): MT19937's init_genrand.
  explicit NumpyRandomState(uint32_t seed);

  /// One raw MT19937 output (RandomState's bit generator random_raw()).
  uint32_t next_uint32();
  /// np.random.random_sample(): two outputs, 27 + 26 bits, into [0, 1).
  double random_sample();
  /// np.random.randn() / standard_normal(): legacy polar gauss.
  double randn();
  /// np.random.randn(n) (or any shape, C order). The spare gauss survives
  /// between calls, as in NumPy: randn(5) then randn(3) equals randn(8).
  void randn(double* out, size_t n);

 private:
  /// std::mt19937 is MT19937 exactly as NumPy's, seeding included: the C++
  /// standard fixes both the recurrence and init_genrand's seed expansion.
  std::mt19937 mt_;
  bool has_gauss_ = false;  ///< the polar method makes two values per accepted pair
  double gauss_ = 0.0;
};

}  // namespace qkv
