// gpt_attention.cpp: each block's attention, forward and backward: c_attn's
// output split into heads, RoPE, qkv::attention over the T positions (or
// the KV cache, or packed sequences), and the heads merged again.
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "model/gpt_work.h"
#include "model/layers/nn_common.h"
#include "qkv/gpt.h"
#include "qkv/nn.h"

namespace qkv {

namespace {

// dst[i] = bf16(src[i]) and src[i] = float(dst[i]): compiled for AVX-512,
// AVX2 and baseline x86-64, picked when the program loads (as gelu.cpp
// does): the baseline loop ran SSE2, 2% of a bf16 training step. Every
// version gives the same bits (integer arithmetic only).
__attribute__((target_clones("avx512f", "avx2", "default")))
void round_span(float* __restrict src, bfloat16* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = bf16_from_float(src[i]);
    src[i] = bf16_to_float(dst[i]);
  }
}

// Rounds each x[t] (float32) to bf16 into x16[t], (re)made to x[t]'s shape,
// and x[t] itself to the same values: the backward then runs the float32
// kernel on exactly the operands the bf16 forward read, with no copies (what
// attention_backward does for bf16 inputs, less its allocations). One
// parallel region for q, k and v, in chunks of the three laid end to end.
void round_to_bf16(const std::array<Tensor*, 3>& x16, const std::array<Tensor*, 3>& x) {
  int64_t total = 0;
  for (int t = 0; t < 3; ++t) {
    if (x16[t]->dtype() != DType::bf16 || x16[t]->shape() != x[t]->shape())
      *x16[t] = Tensor(DType::bf16, x[t]->shape());
    total += x[t]->numel();
  }
  nn::detail::for_chunks(total, [&](int64_t i, int64_t n) {
    for (int t = 0; t < 3 && n > 0; ++t) {
      const int64_t len = x[t]->numel();
      if (i >= len) {
        i -= len;
        continue;
      }
      const int64_t m = std::min(n, len - i);
      round_span(x[t]->data<float>() + i, x16[t]->data<bfloat16>() + i, m);
      i = 0;
      n -= m;
    }
  });
}

// Writes the new keys and values k, v [Hkv, T, hs] at positions pos0 ..
// pos0 + T - 1 of a layer's cache kc, vc [Hkv, context, hs]: each head's T
// rows are one run.
template <class E>
void append_to_cache(E* kc, E* vc, const E* k, const E* v, int64_t Hkv, int64_t Tn, int64_t hs,
                     int64_t ctx, int64_t pos0) {
  for (int64_t g = 0; g < Hkv; ++g) {
    std::copy_n(k + g * Tn * hs, Tn * hs, kc + (g * ctx + pos0) * hs);
    std::copy_n(v + g * Tn * hs, Tn * hs, vc + (g * ctx + pos0) * hs);
  }
}

}  // namespace

// c_attn's row [q heads | k heads | v heads] -> q [B, H, T, hs], k, v [B, Hkv, T, hs],
// RoPE on q and k, then attention. Without caches: sequence b at positions
// 0 .. T - 1, attention among them (causal, top-left). With caches:
// sequence b at positions caches[b]->len() on, its keys and values appended
// to its cache's layer l and its queries against all of them (causal,
// bottom-right: query t sees the cached keys and the new ones up to its own).
template <class T>
void BasicGPT<T>::attention_forward(int64_t l, std::span<KVCache* const> caches) {
  auto& a = work_->layer_acts(l);
  const int64_t B = work_->acts.B, Tn = work_->acts.Tn, H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int64_t hs = cfg_.head_dim();
  T* q = a.q.template data<T>();
  T* k = a.k.template data<T>();
  T* v = a.v.template data<T>();
  nn::split_qkv(q, k, v, a.qkv.data(), B, Tn, H, Hkv, hs, work_->qk_paired);
  if (cfg_.rope) {
    if (caches.empty()) {
      nn::rope_forward(q, q, work_->rope, B * H, Tn, hs, 0);
      nn::rope_forward(k, k, work_->rope, B * Hkv, Tn, hs, 0);
    }
    for (int64_t b = 0; b < static_cast<int64_t>(caches.size()); ++b) {
      T* qb = q + b * H * Tn * hs;
      T* kb = k + b * Hkv * Tn * hs;
      nn::rope_forward(qb, qb, work_->rope, H, Tn, hs, caches[b]->len_);
      nn::rope_forward(kb, kb, work_->rope, Hkv, Tn, hs, caches[b]->len_);
    }
  }
  if (!caches.empty()) {
    AttentionOptions o = attn_opts_;
    o.return_lse = false;
    o.causal = Causal::bottom_right;
    // One dtype for the batch (decode_batch checks): float32 models only for bf16 (check_append).
    const bool bf16 = caches.front()->dtype_ == DType::bf16;
    if (bf16) {
      // q, k and v rounded as the bf16 forward rounds them; k and v kept so.
      round_to_bf16({&a.q16, &a.k16, &a.v16}, {&a.q, &a.k, &a.v});
      o.out_dtype = DType::f32;
    }
    const Tensor& qs = bf16 ? a.q16 : a.q;
    // One sequence's attention against its own cache, into a.att (B = 1,
    // merged below as without a cache) or its own result, whose [H, 1, hs]
    // is its row of atty as it stands (T = 1).
    auto& seq_att = work_->seq_att;
    if (B > 1 && seq_att.size() < static_cast<size_t>(B)) seq_att.resize(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      KVCache& cache = *caches[b];
      const int64_t pos0 = cache.len_, S = pos0 + Tn;
      Tensor& kc = cache.k_[l];
      Tensor& vc = cache.v_[l];
      if (bf16)
        append_to_cache(kc.data<bfloat16>(), vc.data<bfloat16>(), a.k16.template data<bfloat16>() + b * Hkv * Tn * hs,
                        a.v16.template data<bfloat16>() + b * Hkv * Tn * hs, Hkv, Tn, hs, kc.dim(2), pos0);
      else
        append_to_cache(kc.data<T>(), vc.data<T>(), k + b * Hkv * Tn * hs, v + b * Hkv * Tn * hs, Hkv, Tn, hs,
                        kc.dim(2), pos0);
      AttentionResult& r = B == 1 ? a.att : seq_att[static_cast<size_t>(b)];
      attention_into(r, B == 1 ? TensorView(qs) : TensorView(qs).slice(0, b, b + 1), TensorView(kc).slice(2, 0, S),
                     TensorView(vc).slice(2, 0, S), o);
      if (B > 1) std::copy_n(r.out.template data<T>(), H * hs, a.atty.data() + b * cfg_.attn_dim());
    }
    if (B > 1) return;
  } else if (compute_ == DType::bf16) {
    round_to_bf16({&a.q16, &a.k16, &a.v16}, {&a.q, &a.k, &a.v});
    AttentionOptions o = attn_opts_;
    o.out_dtype = DType::f32;
    attention_into(a.att, a.q16, a.k16, a.v16, o);
  } else {
    attention_into(a.att, a.q, a.k, a.v, attn_opts_);
  }
  nn::merge_heads(a.atty.data(), a.att.out.template data<T>(), B, Tn, H, hs, H * hs, 0);
}

// The same in reverse: datty [BT, A] -> dout [B, H, T, hs] -> attention's
// backward -> RoPE back on dq, dk -> dqkv [BT, (H + 2 Hkv) hs].
template <class T>
void BasicGPT<T>::attention_backward(int64_t l) {
  Work& W = *work_;
  auto& a = W.acts.layers[l];
  const int64_t B = W.acts.B, Tn = W.acts.Tn, H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int64_t hs = cfg_.head_dim();
  nn::split_heads(W.dout.template data<T>(), W.datty.data(), B, Tn, H, hs, H * hs, 0);
  // Under bf16 compute q, k, v hold the rounded values (round_to_bf16).
  attention_backward_into(W.dattn, a.q, a.k, a.v, a.att.out, a.att.lse, W.dout, attn_opts_);
  T* dq = W.dattn.dq.template data<T>();
  T* dk = W.dattn.dk.template data<T>();
  if (cfg_.rope) {
    nn::rope_backward(dq, dq, W.rope, B * H, Tn, hs);
    nn::rope_backward(dk, dk, W.rope, B * Hkv, Tn, hs);
  }
  nn::merge_qkv(W.dqkv.data(), dq, dk, W.dattn.dv.template data<T>(), B, Tn, H, Hkv, hs);
}

// Packed sequences (Acts::lengths, starts): c_attn's rows of sequence i,
// [n_i, (H + 2 Hkv) hs] -> q [B, H, T, hs], k, v [B, Hkv, T, hs] padded to
// the longest (T), attention with key lengths (padded keys never count;
// padded queries' rows are computed and dropped), and back to the real rows.
template <class T>
void BasicGPT<T>::packed_attention_forward(int64_t l) {
  auto& a = work_->acts;
  auto& la = work_->layer_acts(l);
  const int64_t B = a.B, Tn = a.Tn, H = cfg_.heads, Hkv = cfg_.kv_heads, hs = cfg_.head_dim();
  const int64_t A = cfg_.attn_dim(), row = (H + 2 * Hkv) * hs;
  T* q = la.q.template data<T>();
  T* k = la.k.template data<T>();
  T* v = la.v.template data<T>();
  const T* src = la.qkv.data();
  // A q or k head, in halves (from RoPE's adjacent pairs: Work::qk_paired).
  const bool paired = work_->qk_paired;
  auto qk_head = [paired, hs](const T* from, T* to) {
    if (paired) nn::detail::unpair_head(from, to, hs);
    else std::copy_n(from, hs, to);
  };
#pragma omp parallel for schedule(static) collapse(2) if (a.rows * row >= nn::detail::kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      if (t >= a.lengths[b]) continue;
      const T* r = src + (a.starts[b] + t) * row;
      for (int64_t h = 0; h < H; ++h) qk_head(r + h * hs, q + ((b * H + h) * Tn + t) * hs);
      for (int64_t h = 0; h < Hkv; ++h) {
        qk_head(r + (H + h) * hs, k + ((b * Hkv + h) * Tn + t) * hs);
        std::copy_n(r + (H + Hkv + h) * hs, hs, v + ((b * Hkv + h) * Tn + t) * hs);
      }
    }
  // Each sequence's positions start at 0 (its padding turns too, unread).
  if (cfg_.rope) {
    nn::rope_forward(q, q, work_->rope, B * H, Tn, hs, 0);
    nn::rope_forward(k, k, work_->rope, B * Hkv, Tn, hs, 0);
  }
  AttentionOptions o = attn_opts_;
  o.return_lse = false;
  o.key_lengths = a.lengths;
  attention_into(la.att, la.q, la.k, la.v, o);
  const T* out = la.att.out.template data<T>();
  T* y = la.atty.data();
#pragma omp parallel for schedule(static) collapse(2) if (a.rows * A >= nn::detail::kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t) {
      if (t >= a.lengths[b]) continue;
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(out + ((b * H + h) * Tn + t) * hs, hs, y + (a.starts[b] + t) * A + h * hs);
    }
}

template void BasicGPT<float>::attention_forward(int64_t, std::span<KVCache* const>);
template void BasicGPT<double>::attention_forward(int64_t, std::span<KVCache* const>);
template void BasicGPT<float>::attention_backward(int64_t);
template void BasicGPT<double>::attention_backward(int64_t);
template void BasicGPT<float>::packed_attention_forward(int64_t);
template void BasicGPT<double>::packed_attention_forward(int64_t);

}  // namespace qkv
