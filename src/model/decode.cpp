// decode.cpp: the KV cache and one generation step of the GPT (qkv/gpt.h).
//
// A step runs the same layers as forward() on one token, with B = T = 1, and
// attends its one query against the keys and values cached for the earlier
// positions; tests/test_gpt_grad.cpp checks that its logits equal forward()'s
// at every position.
#include <algorithm>
#include <string>

#include "qkv/gpt.h"
#include "qkv/runtime.h"
#include "qkv/nn.h"

namespace qkv {

KVCache::KVCache(const GPTConfig& cfg, DType dtype) : cfg_(cfg), dtype_(dtype) {
  cfg_.validate();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw Error(std::string("kv cache: expected float32 or float64, found ") + dtype_name(dtype));
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    k_.emplace_back(dtype, Shape{1, cfg_.kv_heads, cfg_.context, cfg_.head_dim()});
    v_.emplace_back(dtype, Shape{1, cfg_.kv_heads, cfg_.context, cfg_.head_dim()});
  }
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

void KVCache::check_append(const GPTConfig& cfg, DType dtype) const {
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
  if (dtype != dtype_)
    throw Error(std::string("kv cache: holds ") + dtype_name(dtype_) + ", used with a " +
                dtype_name(dtype) + " model");
  if (len_ >= cfg_.context)
    throw Error("kv cache: full: all " + std::to_string(cfg_.context) +
                " positions of the context are used; reset() it to start a new sequence");
}

template <class T>
KVCache BasicGPT<T>::new_cache() const {
  return KVCache(cfg_, dtype_of<T>());
}

template <class T>
std::span<const T> BasicGPT<T>::decode_step(int32_t token, KVCache& cache) {
  const ThreadScope threads(attn_opts_.threads);
  const int64_t C = cfg_.embd, V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t H = cfg_.heads, Hkv = cfg_.kv_heads, qkv_out = (H + 2 * Hkv) * hs;
  cache.check_append(cfg_, dtype_of<T>());
  if (token < 0 || token >= V)
    throw Error("gpt: token id " + std::to_string(token) + " outside the vocabulary [0, " +
                std::to_string(V) + ")");
  const int64_t pos = cache.len_, ctx = cfg_.context;
  step_x_.resize(C), step_ln_.resize(C), step_qkv_.resize(qkv_out), step_y_.resize(C);
  step_fc_.resize(8 * C), step_logits_.resize(V);
  T mean, rstd;
  if (step_q_.numel() != H * hs) step_q_ = Tensor(dtype_of<T>(), {1, H, 1, hs});
  const int32_t tok = token;
  // Embedding of one token at position pos: the wpe row is wpe + pos * C.
  nn::embedding_forward(step_x_.data(), &tok, w(wte_), wpe_ >= 0 ? w(wpe_ + pos * C) : nullptr,
                        1, 1, C);
  AttentionOptions opts = attn_opts_;
  opts.causal = Causal::none;  // one query: it may see every cached key
  opts.return_lse = false;
  opts.key_lengths = {pos + 1};
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const Layer& L = layer_[l];
    nn::layernorm_forward(step_ln_.data(), &mean, &rstd, step_x_.data(), w(L.ln1_w), w(L.ln1_b),
                          1, C);
    nn::linear_forward(step_qkv_.data(), step_ln_.data(), w(L.attn_w), w(L.attn_b), 1, C,
                       qkv_out);
    // One token: c_attn's row is already [q heads | k heads | v heads], head-major.
    T* q = step_q_.template data<T>();
    std::copy(step_qkv_.begin(), step_qkv_.begin() + H * hs, q);
    T* kc = cache.k_[l].template data<T>();
    T* vc = cache.v_[l].template data<T>();
    for (int64_t g = 0; g < Hkv; ++g) {
      std::copy_n(step_qkv_.data() + (H + g) * hs, hs, kc + (g * ctx + pos) * hs);
      std::copy_n(step_qkv_.data() + (H + Hkv + g) * hs, hs, vc + (g * ctx + pos) * hs);
    }
    if (cfg_.rope) {
      nn::rope_forward(q, q, rope_, H, 1, hs, pos);
      for (int64_t g = 0; g < Hkv; ++g) {
        T* k = kc + (g * ctx + pos) * hs;
        nn::rope_forward(k, k, rope_, 1, 1, hs, pos);
      }
    }
    attention_into(step_att_, step_q_, cache.k_[l], cache.v_[l], opts);
    // One token: heads [1, H, 1, hs] are already in [1, C] order.
    nn::linear_forward(step_y_.data(), step_att_.out.template data<T>(), w(L.attn_proj_w),
                       w(L.attn_proj_b), 1, C, C);
    nn::residual_forward(step_x_.data(), step_x_.data(), step_y_.data(), C);
    nn::layernorm_forward(step_ln_.data(), &mean, &rstd, step_x_.data(), w(L.ln2_w), w(L.ln2_b),
                          1, C);
    nn::linear_forward(step_fc_.data(), step_ln_.data(), w(L.fc_w), w(L.fc_b), 1, C,
                       4 * C);
    nn::gelu_forward(step_fc_.data() + 4 * C, step_fc_.data(), 4 * C, cfg_.gelu);
    nn::linear_forward(step_y_.data(), step_fc_.data() + 4 * C, w(L.fc_proj_w), w(L.fc_proj_b),
                       1, 4 * C, C);
    nn::residual_forward(step_x_.data(), step_x_.data(), step_y_.data(), C);
  }
  // Only now, with every layer's key and value written, does the position count.
  cache.len_ = pos + 1;
  nn::layernorm_forward(step_ln_.data(), &mean, &rstd, step_x_.data(), w(lnf_w_), w(lnf_b_),
                        1, C);
  nn::linear_forward<T>(step_logits_.data(), step_ln_.data(), w(wte_), nullptr,
                     1, C, V);
  return {step_logits_.data(), step_logits_.size()};
}

// gpt.cpp instantiates the rest of the class; these members live here.
template KVCache BasicGPT<float>::new_cache() const;
template KVCache BasicGPT<double>::new_cache() const;
template std::span<const float> BasicGPT<float>::decode_step(int32_t, KVCache&);
template std::span<const double> BasicGPT<double>::decode_step(int32_t, KVCache&);

}  // namespace qkv
