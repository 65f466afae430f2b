// gpt_inspect.cpp: looking inside a trained GPT (its attention weights).
#include <cstring>

#include "qkv/gpt.h"

namespace qkv {

Tensor GPT::attention_maps(const int32_t* tokens, int64_t T) {
  forward(tokens, nullptr, 1, T);
  const int64_t L = cfg_.layers, H = cfg_.heads;
  Tensor maps(DType::f32, {L, H, T, T});
  AttentionOptions o = attn_opts_;
  o.return_weights = true;
  o.return_lse = false;
  for (int64_t l = 0; l < L; ++l) {
    // The layer's q, k, v as the forward left them: [1, H|Hkv, T, hs].
    const LayerActs& a = acts_.layers[l];
    const AttentionResult r = attention(a.q, a.k, a.v, o);  // weights [1, H, T, T]
    std::memcpy(maps.data<float>() + l * H * T * T, r.weights.data<float>(),
                sizeof(float) * static_cast<size_t>(H * T * T));
  }
  return maps;
}

}  // namespace qkv
