// gpt.cpp: the model's parameters, forward and backward, block by block.
#include "qkv/gpt.h"
#include "qkv/runtime.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <type_traits>

#include "model/layers/nn_common.h"
#include "qkv/nn.h"
#include "qkv/rng.h"

namespace qkv {
namespace {
constexpr nn::WeightLayout kOutIn = nn::WeightLayout::out_in;  // every GPT weight is [OC, C]
}  // namespace

void GPTConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("model config: " + what);
  };
  need(vocab >= 1, "vocab must be at least 1, found " + std::to_string(vocab));
  need(context >= 1, "context must be at least 1, found " + std::to_string(context));
  need(layers >= 1, "layers must be at least 1, found " + std::to_string(layers));
  need(embd >= 1, "embd must be at least 1, found " + std::to_string(embd));
  need(heads >= 1 && embd % heads == 0,
       "heads must divide embd " + std::to_string(embd) + ", found " + std::to_string(heads));
  need(kv_heads >= 1 && heads % kv_heads == 0,
       "kv_heads must divide heads " + std::to_string(heads) + ", found " + std::to_string(kv_heads));
  need(!rope || head_dim() % 2 == 0,
       "rope needs an even head dim, found embd / heads = " + std::to_string(head_dim()));
}

template <class T>
BasicGPT<T>::BasicGPT(const GPTConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  build_params();
  if (cfg_.rope) rope_ = nn::RopeTable(cfg_.context, cfg_.head_dim());
  attn_opts_.causal = Causal::top_left;
  attn_opts_.return_lse = true;
  // Activations come from our own forward, never from the user.
  attn_opts_.check_finite = false;
}

template <class T>
void BasicGPT<T>::set_threads(int threads) {
  check_threads(threads);
  attn_opts_.threads = threads;
}

template <class T>
void BasicGPT<T>::set_attention(Kernel kernel, int threads) {
  set_threads(threads);
  attn_opts_.kernel = kernel;
}

template <class T>
void BasicGPT<T>::set_compute_dtype(DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw Error(std::string("gpt: compute dtype must be float32 or bfloat16, found ") + dtype_name(dtype));
  if (dtype == DType::bf16 && !std::is_same_v<T, float>)
    throw Error("gpt: bfloat16 compute is for the float32 model (GPT); the float64 model checks it");
  compute_ = dtype;
}

namespace {

// v = 0 on the layers' threads, rows split as the row-parallel layers split
// them (one core's memset of the gradient buffers left the other idle).
template <class T>
void zero(std::vector<T>& v) {
  T* p = v.data();
  nn::detail::for_chunks(static_cast<int64_t>(v.size()),
                         [p](int64_t i, int64_t n) { std::fill(p + i, p + i + n, T(0)); });
}

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

}  // namespace

template <class T>
void BasicGPT<T>::build_params() {
  const int64_t C = cfg_.embd, hs = cfg_.head_dim();
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * hs;
  int64_t off = 0;
  auto add = [&](const std::string& name, Shape shape, bool decay) -> int64_t {
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_bias && !cfg_.bias) return -1;
    const int64_t n = shape_numel(shape);
    params_.push_back({name, std::move(shape), off, n, decay});
    off += n;
    return off - n;
  };
  wte_ = add("transformer.wte.weight", {cfg_.vocab, C}, true);
  if (!cfg_.rope) wpe_ = add("transformer.wpe.weight", {cfg_.context, C}, true);
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    Layer L;
    L.ln1_w = add(p + "ln_1.weight", {C}, false);
    L.ln1_b = add(p + "ln_1.bias", {C}, false);
    L.attn_w = add(p + "attn.c_attn.weight", {qkv_out, C}, true);
    L.attn_b = add(p + "attn.c_attn.bias", {qkv_out}, false);
    L.attn_proj_w = add(p + "attn.c_proj.weight", {C, C}, true);
    L.attn_proj_b = add(p + "attn.c_proj.bias", {C}, false);
    L.ln2_w = add(p + "ln_2.weight", {C}, false);
    L.ln2_b = add(p + "ln_2.bias", {C}, false);
    L.fc_w = add(p + "mlp.c_fc.weight", {4 * C, C}, true);
    L.fc_b = add(p + "mlp.c_fc.bias", {4 * C}, false);
    L.fc_proj_w = add(p + "mlp.c_proj.weight", {C, 4 * C}, true);
    L.fc_proj_b = add(p + "mlp.c_proj.bias", {C}, false);
    layer_.push_back(L);
  }
  lnf_w_ = add("transformer.ln_f.weight", {C}, false);
  lnf_b_ = add("transformer.ln_f.bias", {C}, false);
  w_.assign(static_cast<size_t>(off), T(0));
  g_.assign(static_cast<size_t>(off), T(0));
  // The parameters whose gradient backward() overwrites (the Linear layers'
  // and wte's; see there); every other one is zeroed before it accumulates.
  std::vector<int64_t> set = {wte_};
  for (const Layer& L : layer_)
    set.insert(set.end(), {L.attn_w, L.attn_b, L.attn_proj_w, L.attn_proj_b, L.fc_w, L.fc_b,
                           L.fc_proj_w, L.fc_proj_b});
  for (const ParamInfo& p : params_)
    if (std::find(set.begin(), set.end(), p.offset) == set.end())
      accumulated_grads_.push_back({p.offset, p.size});
}

template <class T>
void BasicGPT<T>::init(uint64_t seed) {
  NumpyGenerator rng(seed);
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.layers));
  for (const ParamInfo& p : params_) {
    T* x = w_.data() + p.offset;
    const bool is_norm = p.name.find(".ln_") != std::string::npos;
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      std::fill(x, x + p.size, T(0));
    } else if (is_norm) {
      std::fill(x, x + p.size, T(1));
    } else {
      // nanoGPT scales the init of the projections that write into the
      // residual stream by 1/sqrt(2L), so the stream's variance does not grow
      // with depth.
      const bool resid = p.name.find("c_proj.weight") != std::string::npos;
      const double sd = resid ? resid_std : 0.02;
      for (int64_t i = 0; i < p.size; ++i) x[i] = static_cast<T>(rng.normal(0.0, sd));
    }
  }
}

namespace {

// A LinearIn of n elements, in bf16 under bf16 compute, else in T.
template <class In>
void size_input(In& in, int64_t n, bool bf16) {
  in.x.assign(bf16 ? 0 : n, 0);
  in.x16.assign(bf16 ? n : 0, bfloat16{});
}

// The layers that make a Linear's input write it as the LinearIn holds it
// (float32, or rounded to bf16: the same values the GEMM would round to),
// and the Linear reads it so. BasicGPT<double> never holds bf16.
template <class In, class T>
void layernorm_to(In& out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t BT,
                  int64_t C) {
  if constexpr (std::is_same_v<T, float>)
    if (!out.x16.empty())
      return nn::layernorm_forward(out.x16.data(), mean, rstd, inp, w, b, BT, C);
  nn::layernorm_forward(out.x.data(), mean, rstd, inp, w, b, BT, C);
}

template <class In, class T>
void gelu_to(In& out, const T* inp, int64_t N, nn::Gelu form) {
  if constexpr (std::is_same_v<T, float>)
    if (!out.x16.empty()) return nn::gelu_forward(out.x16.data(), inp, N, form);
  nn::gelu_forward(out.x.data(), inp, N, form);
}

template <class In, class T>
void linear_from(T* out, const In& in, const T* w, const T* b, int64_t BT, int64_t C, int64_t OC,
                 nn::Matmul matmul) {
  if constexpr (std::is_same_v<T, float>)
    if (!in.x16.empty()) return nn::linear_forward(out, in.x16.data(), w, b, BT, C, OC);
  nn::linear_forward(out, in.x.data(), w, b, BT, C, OC, nn::WeightLayout::out_in, matmul);
}

// The backward of linear_from: input gradient and parameter gradients
// overwritten (each has one producer per step).
template <class In, class T>
void linear_back_from(T* dinp, T* dw, T* db, const T* dout, const In& in, const T* w, int64_t BT,
                      int64_t C, int64_t OC, nn::Matmul matmul) {
  constexpr nn::Grad kSet = nn::Grad::overwrite;
  if constexpr (std::is_same_v<T, float>)
    if (!in.x16.empty())
      return nn::linear_backward(dinp, dw, db, dout, in.x16.data(), w, BT, C, OC, kSet, kSet);
  nn::linear_backward(dinp, dw, db, dout, in.x.data(), w, BT, C, OC, matmul, kSet, kSet);
}

}  // namespace

template <class T>
void BasicGPT<T>::ensure_acts(int64_t B, int64_t Tn) {
  if (acts_.B == B && acts_.Tn == Tn && acts_.compute == compute_) return;
  const bool bf16 = compute_ == DType::bf16;
  const int64_t BT = B * Tn, C = cfg_.embd, V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t H = cfg_.heads, Hkv = cfg_.kv_heads, qkv_out = (H + 2 * Hkv) * hs;
  const DType dt = dtype_of<T>();
  Acts& a = acts_;
  a.B = B, a.Tn = Tn, a.compute = compute_;
  a.tokens.assign(BT, 0), a.targets.assign(BT, 0);
  a.encoded.assign(BT * C, T(0));
  a.layers.assign(cfg_.layers, LayerActs{});
  for (LayerActs& l : a.layers) {
    size_input(l.ln1, BT * C, bf16), l.ln1_mean.assign(BT, T(0)), l.ln1_rstd.assign(BT, T(0));
    l.qkv.assign(BT * qkv_out, T(0));
    l.q = Tensor(dt, {B, H, Tn, hs});
    l.k = Tensor(dt, {B, Hkv, Tn, hs});
    l.v = Tensor(dt, {B, Hkv, Tn, hs});
    l.atty.assign(BT * C, T(0)), l.res2.assign(BT * C, T(0));
    size_input(l.ln2, BT * C, bf16), l.ln2_mean.assign(BT, T(0)), l.ln2_rstd.assign(BT, T(0));
    l.fch.assign(BT * 4 * C, T(0)), size_input(l.fch_gelu, BT * 4 * C, bf16);
    l.res3.assign(BT * C, T(0));
  }
  size_input(a.lnf, BT * C, bf16), a.lnf_mean.assign(BT, T(0)), a.lnf_rstd.assign(BT, T(0));
  a.probs.assign(BT * V, T(0)), a.losses.assign(BT, T(0));
  logits_.assign(BT * V, T(0));
  dres_.assign(BT * C, T(0)), dln_.assign(BT * C, T(0)), dqkv_.assign(BT * qkv_out, T(0));
  datty_.assign(BT * C, T(0)), dfch_.assign(BT * 4 * C, T(0)), dfch_gelu_.assign(BT * 4 * C, T(0));
  dlogits_.assign(BT * V, T(0));
  dout_ = Tensor(dt, {B, H, Tn, hs});
}

// c_attn's row [q heads | k heads | v heads] -> q [B, H, T, hs], k, v [B, Hkv, T, hs],
// then RoPE on q and k at positions 0 .. T - 1.
template <class T>
void BasicGPT<T>::attention_forward(LayerActs& a) {
  const int64_t B = acts_.B, Tn = acts_.Tn, H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int64_t hs = cfg_.head_dim();
  T* q = a.q.template data<T>();
  T* k = a.k.template data<T>();
  nn::split_qkv(q, k, a.v.template data<T>(), a.qkv.data(), B, Tn, H, Hkv, hs);
  if (cfg_.rope) {
    nn::rope_forward(q, q, rope_, B * H, Tn, hs);
    nn::rope_forward(k, k, rope_, B * Hkv, Tn, hs);
  }
  if (compute_ == DType::bf16) {
    round_to_bf16({&a.q16, &a.k16, &a.v16}, {&a.q, &a.k, &a.v});
    AttentionOptions o = attn_opts_;
    o.out_dtype = DType::f32;
    attention_into(a.att, a.q16, a.k16, a.v16, o);
  } else {
    attention_into(a.att, a.q, a.k, a.v, attn_opts_);
  }
  nn::merge_heads(a.atty.data(), a.att.out.template data<T>(), B, Tn, H, hs, H * hs, 0);
}

// The same in reverse: datty [BT, C] -> dout [B, H, T, hs] -> attention's
// backward -> RoPE back on dq, dk -> dqkv [BT, (H + 2 Hkv) hs].
template <class T>
void BasicGPT<T>::attention_backward(LayerActs& a) {
  const int64_t B = acts_.B, Tn = acts_.Tn, H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int64_t hs = cfg_.head_dim();
  nn::split_heads(dout_.template data<T>(), datty_.data(), B, Tn, H, hs, H * hs, 0);
  // Under bf16 compute q, k, v hold the rounded values (round_to_bf16).
  attention_backward_into(dattn_, a.q, a.k, a.v, a.att.out, a.att.lse, dout_, attn_opts_);
  T* dq = dattn_.dq.template data<T>();
  T* dk = dattn_.dk.template data<T>();
  if (cfg_.rope) {
    nn::rope_backward(dq, dq, rope_, B * H, Tn, hs);
    nn::rope_backward(dk, dk, rope_, B * Hkv, Tn, hs);
  }
  nn::merge_qkv(dqkv_.data(), dq, dk, dattn_.dv.template data<T>(), B, Tn, H, Hkv, hs);
}

template <class T>
T BasicGPT<T>::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t Tn) {
  const ThreadScope threads(attn_opts_.threads);
  if (B < 1 || Tn < 1 || Tn > cfg_.context)
    throw Error("gpt: expected 1 <= T <= context " + std::to_string(cfg_.context) +
                " and B >= 1, found B = " + std::to_string(B) + ", T = " + std::to_string(Tn));
  ensure_acts(B, Tn);
  Acts& a = acts_;
  const int64_t BT = B * Tn, C = cfg_.embd, V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * hs;
  for (int64_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V)
      throw Error("gpt: token id " + std::to_string(tokens[i]) + " outside the vocabulary [0, " +
                  std::to_string(V) + ")");
    a.tokens[i] = tokens[i];
  }
  nn::embedding_forward(a.encoded.data(), a.tokens.data(), w(wte_), w(wpe_), B, Tn, C);
  const T* x = a.encoded.data();
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const Layer& L = layer_[l];
    LayerActs& la = a.layers[l];
    layernorm_to(la.ln1, la.ln1_mean.data(), la.ln1_rstd.data(), x, w(L.ln1_w), w(L.ln1_b), BT, C);
    linear_from(la.qkv.data(), la.ln1, w(L.attn_w), w(L.attn_b), BT, C, qkv_out, matmul());
    attention_forward(la);
    // res2 = x + attn proj: project into res2, then add the stream.
    nn::linear_forward(la.res2.data(), la.atty.data(), w(L.attn_proj_w), w(L.attn_proj_b), BT, C, C,
                       kOutIn, matmul());
    nn::residual_forward(la.res2.data(), la.res2.data(), x, BT * C);
    layernorm_to(la.ln2, la.ln2_mean.data(), la.ln2_rstd.data(), la.res2.data(), w(L.ln2_w),
                 w(L.ln2_b), BT, C);
    linear_from(la.fch.data(), la.ln2, w(L.fc_w), w(L.fc_b), BT, C, 4 * C, matmul());
    gelu_to(la.fch_gelu, la.fch.data(), BT * 4 * C, cfg_.gelu);
    linear_from(la.res3.data(), la.fch_gelu, w(L.fc_proj_w), w(L.fc_proj_b), BT, 4 * C, C,
                matmul());
    nn::residual_forward(la.res3.data(), la.res3.data(), la.res2.data(), BT * C);
    x = la.res3.data();
  }
  layernorm_to(a.lnf, a.lnf_mean.data(), a.lnf_rstd.data(), x, w(lnf_w_), w(lnf_b_), BT, C);
  linear_from(logits_.data(), a.lnf, w(wte_), static_cast<const T*>(nullptr), BT, C, V,
              matmul());  // tied head
  has_targets_ = targets != nullptr;
  if (!has_targets_) return T(0);
  for (int64_t i = 0; i < BT; ++i) {
    if (targets[i] < 0 || targets[i] >= V)
      throw Error("gpt: target id " + std::to_string(targets[i]) + " outside the vocabulary");
    a.targets[i] = targets[i];
  }
  nn::crossentropy_forward(a.losses.data(), a.probs.data(), logits_.data(), a.targets.data(), BT, V);
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
  return static_cast<T>(sum / static_cast<double>(BT));
}

template <class T>
void BasicGPT<T>::backward() {
  const ThreadScope threads(attn_opts_.threads);
  if (!has_targets_) throw Error("gpt: backward needs a forward with targets");
  Acts& a = acts_;
  const int64_t B = a.B, Tn = a.Tn, BT = B * Tn, C = cfg_.embd, V = cfg_.vocab;
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * cfg_.head_dim();
  // Each Linear's weight and bias gradients are overwritten by their only
  // producer (wte's by the tied head first; the embedding adds to it last):
  // only the other parameters' gradients start from zero.
  for (const auto& [off, n] : accumulated_grads_)
    std::fill(g_.begin() + off, g_.begin() + off + n, T(0));
  zero(dlogits_);
  nn::crossentropy_backward(dlogits_.data(), a.probs.data(), a.targets.data(),
                            T(1) / static_cast<T>(BT), BT, V);
  // dres_ carries dLoss/d(residual stream) down through the blocks: it sums
  // two consumers per block, so it accumulates from zero. dln_, datty_,
  // dfch_ and dfch_gelu_ each have one producer before each read, which
  // overwrites them (no zeroing: the backward used to clear ~20 MB per step).
  constexpr nn::Grad kSet = nn::Grad::overwrite;
  // The GEMMs of the compute dtype the forward ran in (its LinearIns hold it).
  const nn::Matmul mm = matmul_for(a.compute);
  zero(dres_);
  linear_back_from(dln_.data(), g(wte_), static_cast<T*>(nullptr), dlogits_.data(), a.lnf,
                   w(wte_), BT, C, V, mm);
  const T* x_last = cfg_.layers ? a.layers.back().res3.data() : a.encoded.data();
  nn::layernorm_backward(dres_.data(), g(lnf_w_), g(lnf_b_), dln_.data(), x_last, w(lnf_w_),
                         a.lnf_mean.data(), a.lnf_rstd.data(), BT, C);
  for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const Layer& L = layer_[l];
    LayerActs& la = a.layers[l];
    const T* x = l ? a.layers[l - 1].res3.data() : a.encoded.data();
    // res3 = res2 + mlp(ln2(res2)): dres flows to res2 directly and through the MLP.
    linear_back_from(dfch_gelu_.data(), g(L.fc_proj_w), g(L.fc_proj_b), dres_.data(), la.fch_gelu,
                     w(L.fc_proj_w), BT, 4 * C, C, mm);
    nn::gelu_backward(dfch_.data(), la.fch.data(), dfch_gelu_.data(), BT * 4 * C, cfg_.gelu, kSet);
    linear_back_from(dln_.data(), g(L.fc_w), g(L.fc_b), dfch_.data(), la.ln2, w(L.fc_w), BT, C,
                     4 * C, mm);
    nn::layernorm_backward(dres_.data(), g(L.ln2_w), g(L.ln2_b), dln_.data(), la.res2.data(),
                           w(L.ln2_w), la.ln2_mean.data(), la.ln2_rstd.data(), BT, C);
    // res2 = x + proj(attn(ln1(x))).
    nn::linear_backward(datty_.data(), g(L.attn_proj_w), g(L.attn_proj_b), dres_.data(),
                        la.atty.data(), w(L.attn_proj_w), BT, C, C, mm, kSet, kSet);
    attention_backward(la);
    linear_back_from(dln_.data(), g(L.attn_w), g(L.attn_b), dqkv_.data(), la.ln1, w(L.attn_w), BT,
                     C, qkv_out, mm);
    nn::layernorm_backward(dres_.data(), g(L.ln1_w), g(L.ln1_b), dln_.data(), x, w(L.ln1_w),
                           la.ln1_mean.data(), la.ln1_rstd.data(), BT, C);
  }
  nn::embedding_backward(g(wte_), g(wpe_), dres_.data(), a.tokens.data(), B, Tn, C);
}

template class BasicGPT<float>;
template class BasicGPT<double>;

}  // namespace qkv
