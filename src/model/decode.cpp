// decode.cpp: the KV cache and generation with it (qkv/gpt.h).
//
// decode() runs the model's one forward (BasicGPT::run, gpt.cpp) on the new
// tokens with the cache: their queries attend against the keys and values
// cached for the earlier positions. tests/test_gpt_grad.cpp checks that its
// logits equal forward()'s at every position.
#include <algorithm>
#include <string>

#include "model/gpt_work.h"
#include "qkv/gpt.h"
#include "qkv/runtime.h"

namespace qkv {

KVCache::KVCache(const GPTConfig& cfg, DType dtype) : cfg_(cfg), dtype_(dtype) {
  cfg_.validate();
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f64)
    throw Error(std::string("kv cache: expected float32, bf16 or float64, found ") + dtype_name(dtype));
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    k_.emplace_back(dtype, Shape{1, cfg_.kv_heads, cfg_.context, cfg_.head_dim()});
    v_.emplace_back(dtype, Shape{1, cfg_.kv_heads, cfg_.context, cfg_.head_dim()});
  }
}

int64_t KVCache::nbytes() const {
  int64_t n = 0;
  for (size_t l = 0; l < k_.size(); ++l) n += static_cast<int64_t>(k_[l].nbytes() + v_[l].nbytes());
  return n;
}

const Tensor& KVCache::keys(int64_t layer) const {
  if (layer < 0 || layer >= cfg_.layers)
    throw Error("kv cache: layer " + std::to_string(layer) + " outside 0 .. " +
                std::to_string(cfg_.layers - 1));
  return k_[static_cast<size_t>(layer)];
}

const Tensor& KVCache::values(int64_t layer) const {
  keys(layer);  // the same range check
  return v_[static_cast<size_t>(layer)];
}

void KVCache::check_append(const GPTConfig& cfg, DType model_dtype, int64_t n) const {
  auto differ = [&](const char* what, int64_t mine, int64_t theirs) {
    if (mine != theirs)
      throw Error(std::string("kv cache: made for a model with ") + what + " = " +
                  std::to_string(mine) + ", used with one with " + what + " = " +
                  std::to_string(theirs) + " (make it with that model's new_cache())");
  };
  differ("layers", cfg_.layers, cfg.layers);
  differ("kv_heads", cfg_.kv_heads, cfg.kv_heads);
  differ("head dim", cfg_.head_dim(), cfg.head_dim());
  differ("context", cfg_.context, cfg.context);
  differ("rope", cfg_.rope, cfg.rope);  // cached keys are stored already rotated, or not
  if (dtype_ != model_dtype && !(dtype_ == DType::bf16 && model_dtype == DType::f32))
    throw Error(std::string("kv cache: holds ") + dtype_name(dtype_) + ", used with a " +
                dtype_name(model_dtype) + " model (" +
                (model_dtype == DType::f32 ? "it takes a float32 or bf16 cache)" : "it takes a float64 cache)"));
  if (n < 1) throw Error("kv cache: expected at least one token to append, found " + std::to_string(n));
  if (len_ >= cfg_.context)
    throw Error("kv cache: full: all " + std::to_string(cfg_.context) +
                " positions of the context are used; reset() it to start a new sequence");
  if (n > cfg_.context - len_)
    throw Error("kv cache: " + std::to_string(n) + " tokens do not fit: " +
                std::to_string(cfg_.context - len_) + " of the context's " +
                std::to_string(cfg_.context) + " positions are free");
}

template <class T>
DType BasicGPT<T>::default_kv_dtype(DType compute) const {
  return compute == DType::bf16 || matrices_quantized_ ? DType::bf16 : dtype_of<T>();
}

template <class T>
KVCache BasicGPT<T>::new_cache(std::optional<DType> dtype) const {
  return KVCache(cfg_, dtype.value_or(default_kv_dtype(compute_)));
}

template <class T>
std::span<const T> BasicGPT<T>::decode(const int32_t* tokens, int64_t n, KVCache& cache) {
  const ThreadScope threads(attn_opts_.threads);
  if (!cfg_.lm_head || !cfg_.causal)
    throw Error("model: decoding needs a causal model with a language-model head (this is an encoder)");
  cache.check_append(cfg_, dtype_of<T>(), n);
  // run() writes the new keys and values at positions len .. len + n - 1
  // before any of them can count: a token it refuses leaves the cache as it was.
  run(tokens, 1, n, cache.len_, &cache);
  cache.len_ += n;
  return {work_->logits.data(), work_->logits.size()};
}

// gpt.cpp instantiates the rest of the class; these members live here.
template DType BasicGPT<float>::default_kv_dtype(DType) const;
template DType BasicGPT<double>::default_kv_dtype(DType) const;
template KVCache BasicGPT<float>::new_cache(std::optional<DType>) const;
template KVCache BasicGPT<double>::new_cache(std::optional<DType>) const;
template std::span<const float> BasicGPT<float>::decode(const int32_t*, int64_t, KVCache&);
template std::span<const double> BasicGPT<double>::decode(const int32_t*, int64_t, KVCache&);

}  // namespace qkv
