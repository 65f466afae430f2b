// decode.cpp: the KV cache and generation with it (qkv/gpt.h).
//
// decode() runs the model's one forward (BasicGPT::run, gpt.cpp) on the new
// tokens with the cache: their queries attend against the keys and values
// cached for the earlier positions. tests/test_gpt_grad.cpp checks that its
// logits equal forward()'s at every position.
#include <algorithm>
#include <cstring>
#include <string>

#include "model/gpt_work.h"
#include "qkv/gpt.h"
#include "qkv/runtime.h"

namespace qkv {

namespace {
// The positions a new cache holds before it first grows.
constexpr int64_t kFirstPositions = 256;
// The most rows one pass of decode() runs: a longer prompt goes in chunks.
// A pass holds its rows' activations, about 350 KB a row for an 8B model
// (2.9 GB for its 8192-token context in one pass); 256 rows decode a prompt
// as fast as 512 did and held 150 MB less at an 8B Q4_K_M file's 609-token
// prompt (5.34 GB against 5.49, file 4.92; AMD EPYC Zen 4). 128 rows
// prefilled slower: the products' panels are packed once a pass.
constexpr int64_t kPrefillRows = 256;
}  // namespace

// The positions buffers of `held` positions grow to when decoding needs n
// (held when n fits): doubling, up to the context.
static int64_t doubled_positions(int64_t held, int64_t n, int64_t context) {
  return n <= held ? held : std::min(context, std::max(n, 2 * held));
}

KVCache::KVCache(const GPTConfig& cfg, DType dtype) : cfg_(cfg), dtype_(dtype) {
  cfg_.validate();
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f64)
    throw Error(std::string("kv cache: expected float32, bf16 or float64, found ") + dtype_name(dtype));
  k_.resize(static_cast<size_t>(cfg_.layers));
  v_.resize(static_cast<size_t>(cfg_.layers));
  reserve(std::min(cfg_.context, kFirstPositions));
}

// Buffers for n positions, the len_ held copied over. Decoding grows them by
// doubling (grow_for), so that a sequence of the whole context copies each
// position about once, while a short one holds only what it uses: an 8B
// model's full context would be 1 GB of bf16, a thousand times what a
// short chat needs. reserve() sizes them once, exactly, for a caller who
// knows the length.
void KVCache::resize_to(int64_t grown) {
  const int64_t held = k_.front().empty() ? 0 : k_.front().dim(2);
  if (grown <= held) return;
  const int64_t Hkv = cfg_.kv_heads, D = cfg_.head_dim();
  const size_t esize = dtype_size(dtype_);
  std::vector<Tensor> k, v;  // all made before any is swapped in: bad_alloc leaves the cache as it was
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    k.emplace_back(dtype_, Shape{1, Hkv, grown, D});
    v.emplace_back(dtype_, Shape{1, Hkv, grown, D});
  }
  const size_t run = static_cast<size_t>(len_ * D) * esize;
  for (size_t l = 0; l < k.size() && run > 0; ++l)  // nothing held: nothing to copy (nor buffers to copy from)
    for (int64_t g = 0; g < Hkv; ++g) {
      const size_t from = static_cast<size_t>(g * held * D) * esize, to = static_cast<size_t>(g * grown * D) * esize;
      std::memcpy(k[l].raw() + to, k_[l].raw() + from, run);
      std::memcpy(v[l].raw() + to, v_[l].raw() + from, run);
    }
  k_.swap(k);
  v_.swap(v);
}

void KVCache::reserve(int64_t n) { resize_to(std::min(cfg_.context, n)); }

void KVCache::grow_for(int64_t n) {
  resize_to(doubled_positions(k_.front().empty() ? 0 : k_.front().dim(2), n, cfg_.context));
}

int64_t KVCache::bytes_after_reserve(const GPTConfig& cfg, DType dtype, int64_t n) {
  const int64_t first = std::min(cfg.context, kFirstPositions);  // what the constructor reserves
  return std::max(first, std::min(cfg.context, n)) * 2 * cfg.layers * cfg.kv_heads * cfg.head_dim() *
         static_cast<int64_t>(dtype_size(dtype));
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
  cache.grow_for(cache.len_ + n);
  // run() writes the new keys and values at positions len .. len + n - 1,
  // which count once every chunk has run: a call that fails (a token
  // outside the vocabulary in a later chunk, an interrupt) leaves the cache
  // as it was.
  const int64_t len0 = cache.len_;
  KVCache* const one[] = {&cache};
  try {
    for (int64_t i = 0; i < n; i += kPrefillRows) {
      const int64_t rows = std::min(kPrefillRows, n - i);
      run(tokens + i, 1, rows, one);
      cache.len_ += rows;
    }
  } catch (...) {
    cache.len_ = len0;
    throw;
  }
  return {work_->logits.data(), work_->logits.size()};
}

template <class T>
std::span<const T> BasicGPT<T>::decode_batch(std::span<const int32_t> tokens, std::span<KVCache* const> caches) {
  const ThreadScope threads(attn_opts_.threads);
  if (!cfg_.lm_head || !cfg_.causal)
    throw Error("model: decoding needs a causal model with a language-model head (this is an encoder)");
  if (tokens.size() != caches.size())
    throw Error("model: decode_batch: " + std::to_string(tokens.size()) + " tokens for " +
                std::to_string(caches.size()) + " caches (one token a sequence)");
  if (caches.empty()) throw Error("model: decode_batch: no sequences");
  for (size_t b = 0; b < caches.size(); ++b) {
    const std::string which = "model: decode_batch: sequence " + std::to_string(b) + ": ";
    if (!caches[b]) throw Error(which + "no cache");
    for (size_t e = 0; e < b; ++e)
      if (caches[e] == caches[b]) throw Error(which + "its cache is also sequence " + std::to_string(e) + "'s");
    if (caches[b]->dtype_ != caches.front()->dtype_)
      throw Error(which + "a " + dtype_name(caches[b]->dtype_) + " cache beside sequence 0's " +
                  dtype_name(caches.front()->dtype_) + " (one dtype a batch)");
    try {
      caches[b]->check_append(cfg_, dtype_of<T>(), 1);
    } catch (const Error& e) {
      throw Error(which + e.what());
    }
  }
  for (KVCache* c : caches) c->grow_for(c->len_ + 1);
  // run() reads each cache's len() as its sequence's position and leaves it:
  // a call that fails (a token outside the vocabulary) changes no length.
  run(tokens.data(), static_cast<int64_t>(caches.size()), 1, caches);
  for (KVCache* c : caches) ++c->len_;
  return {work_->logits.data(), work_->logits.size()};
}

// gpt.cpp instantiates the rest of the class; these members live here.
template DType BasicGPT<float>::default_kv_dtype(DType) const;
template DType BasicGPT<double>::default_kv_dtype(DType) const;
template KVCache BasicGPT<float>::new_cache(std::optional<DType>) const;
template KVCache BasicGPT<double>::new_cache(std::optional<DType>) const;
template std::span<const float> BasicGPT<float>::decode(const int32_t*, int64_t, KVCache&);
template std::span<const double> BasicGPT<double>::decode(const int32_t*, int64_t, KVCache&);
template std::span<const float> BasicGPT<float>::decode_batch(std::span<const int32_t>, std::span<KVCache* const>);
template std::span<const double> BasicGPT<double>::decode_batch(std::span<const int32_t>, std::span<KVCache* const>);

}  // namespace qkv
