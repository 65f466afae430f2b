// gpt_test_models.h: the small random GPTs the model tests run: tiny()'s
// shape and randomize()'s weights.
#pragma once

#include <cstdint>
#include <string>

#include "qkv/gpt.h"
#include "qkv/rng.h"

namespace qkv {

// The tiny model: vocab 11, context 8, 2 layers, C = 16, 4 heads.
inline GPTConfig tiny(bool rope, int64_t kv_heads, bool bias) {
  GPTConfig c;
  c.vocab = 11;
  c.context = 8;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.embd = 16;
  c.rope = rope;
  c.bias = bias;
  return c;
}

// Weights with signal on every path: nanoGPT's N(0, 0.02) makes attention
// almost uniform and the deep gradients tiny, which a check passes too
// easily. Matrices and embeddings N(0, 0.3²), LayerNorm weights 1 + N(0, 0.1²),
// biases N(0, 0.1²).
template <class T>
inline void randomize(BasicGPT<T>& m, uint64_t seed) {
  NumpyGenerator rng(seed);
  for (const ParamInfo& p : m.params()) {
    const bool norm = p.name.find(".ln_") != std::string::npos;
    const bool bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    for (int64_t i = 0; i < p.size; ++i) {
      const double x = bias ? rng.normal(0.0, 0.1) : norm ? 1.0 + rng.normal(0.0, 0.1)
                                                          : rng.normal(0.0, 0.3);
      m.weights()[p.offset + i] = static_cast<T>(x);
    }
  }
}

}  // namespace qkv
