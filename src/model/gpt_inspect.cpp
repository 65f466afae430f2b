// gpt_inspect.cpp: looking inside a trained GPT (its attention weights).
#include <cstring>
#include <span>

#include "model/gpt_work.h"
#include "qkv/gpt.h"
#include "qkv/runtime.h"

namespace qkv {

template <class T>
Tensor BasicGPT<T>::attention_maps(const int32_t* tokens, int64_t n) {
  // A language model runs its forward (which under bf16 compute leaves the
  // rounded q, k, v); an encoder its one sequence.
  struct KeepAll {  // every block's q, k, v are read below, after the forward
    bool& flag;
    explicit KeepAll(bool& f) : flag(f) { flag = true; }
    ~KeepAll() { flag = false; }
  } keep(work_->keep_all_layers);
  if (cfg_.lm_head) forward(tokens, nullptr, 1, n);
  else hidden_states(tokens, std::span<const int64_t>(&n, 1));
  const ThreadScope threads(attn_opts_.threads);
  const int64_t L = cfg_.layers, H = cfg_.heads;
  Tensor maps(dtype_of<T>(), {L, H, n, n});
  AttentionOptions o = attn_opts_;
  o.return_weights = true;
  o.return_lse = false;
  for (int64_t l = 0; l < L; ++l) {
    // The layer's q, k, v as the forward left them: [1, H|Hkv, n, hs].
    const auto& a = work_->acts.layers[l];
    const AttentionResult r = attention(a.q, a.k, a.v, o);  // weights [1, H, n, n]
    std::memcpy(maps.data<T>() + l * H * n * n, r.weights.data<T>(),
                sizeof(T) * static_cast<size_t>(H * n * n));
  }
  return maps;
}

template class BasicGPT<float>;
template class BasicGPT<double>;

}  // namespace qkv
