// gpt.cpp: the model's parameters, forward and backward, block by block.
#include "qkv/gpt.h"
#include "qkv/runtime.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>
#include <type_traits>

#include "linalg/gemm.h"
#include "model/gpt_work.h"
#include "model/linear_runs.h"
#include "model/layers/nn_common.h"
#include "qkv/nn.h"
#include "qkv/rng.h"

namespace qkv {

void GPTConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("model config: " + what);
  };
  need(vocab >= 1, "vocab must be at least 1, found " + std::to_string(vocab));
  need(context >= 1, "context must be at least 1, found " + std::to_string(context));
  need(layers >= 1, "layers must be at least 1, found " + std::to_string(layers));
  need(embd >= 1, "embd must be at least 1, found " + std::to_string(embd));
  need(head_size >= 0, "head_size must be at least 0 (0: embd / heads), found " + std::to_string(head_size));
  need(heads >= 1 && (head_size > 0 || embd % heads == 0),
       "heads must divide embd " + std::to_string(embd) + ", found " + std::to_string(heads));
  need(kv_heads >= 1 && heads % kv_heads == 0,
       "kv_heads must divide heads " + std::to_string(heads) + ", found " + std::to_string(kv_heads));
  need(!rope || head_dim() % 2 == 0,
       "rope needs an even head dim, found " + std::string(head_size ? "head_size = " : "embd / heads = ") +
           std::to_string(head_dim()));
  need(ffn >= 0, "ffn must be at least 0 (0: 4 * embd), found " + std::to_string(ffn));
  need(std::isfinite(norm_eps) && norm_eps > 0,
       "norm_eps must be a finite number > 0, found " + std::to_string(norm_eps));
  need(token_types >= 0, "token_types must be at least 0, found " + std::to_string(token_types));
  need(std::isfinite(rope_theta) && rope_theta > 0,
       "rope_theta must be a finite number > 0, found " + std::to_string(rope_theta));
  using Kind = RopeScaling::Kind;
  const RopeScaling& rs = rope_scaling;
  need(rs.kind == Kind::none || (std::isfinite(rs.factor) && rs.factor > 0),
       "rope_scaling.factor must be a finite number > 0, found " + std::to_string(rs.factor));
  need(rs.kind != Kind::llama3 || (rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor &&
                                   rs.original_context >= 1),
       "rope_scaling: llama3 needs 0 < low_freq_factor < high_freq_factor and original_context >= 1");
  need(rs.kind != Kind::factors ||
           (static_cast<int64_t>(rs.factors.size()) == head_dim() / 2 &&
            std::all_of(rs.factors.begin(), rs.factors.end(), [](float f) { return std::isfinite(f) && f > 0; })),
       "rope_scaling: factors needs head_dim / 2 = " + std::to_string(head_dim() / 2) +
           " finite numbers > 0, found " + std::to_string(rs.factors.size()) + " numbers");
  need(!lm_head || tied_head || !post_norm, "an untied head is for pre-norm decoders");
  need(window >= 0, "window must be at least 0 (0: none), found " + std::to_string(window));
  need(window == 0 || causal, "a sliding window is for causal models");
}

namespace {

// RoPE's frequencies theta_i = 1 / theta^(2i/D), stretched as the model's
// rope_scaling says (transformers' _compute_llama3_parameters and linear;
// llama.cpp's rope_freqs factors).
std::vector<double> rope_frequencies(const GPTConfig& c) {
  const int64_t D = c.head_dim();
  std::vector<double> theta(static_cast<size_t>(D / 2));
  const GPTConfig::RopeScaling& rs = c.rope_scaling;
  for (int64_t i = 0; i < D / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(D));
    if (rs.kind == GPTConfig::RopeScaling::Kind::linear) {
      f /= rs.factor;
    } else if (rs.kind == GPTConfig::RopeScaling::Kind::factors) {
      f /= static_cast<double>(rs.factors[static_cast<size_t>(i)]);
    } else if (rs.kind == GPTConfig::RopeScaling::Kind::llama3) {
      const double orig = static_cast<double>(rs.original_context);
      const double low_wavelen = orig / rs.low_freq_factor, high_wavelen = orig / rs.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= rs.factor;  // long wavelengths: stretched
      } else if (wavelen >= high_wavelen) {
        const double smooth = (orig / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }  // short wavelengths: kept
    }
    theta[static_cast<size_t>(i)] = f;
  }
  return theta;
}

}  // namespace

template <class T>
BasicGPT<T>::BasicGPT(const GPTConfig& cfg) : cfg_(cfg), work_(std::make_unique<Work>()) {
  cfg_.validate();
  build_params();
  if (cfg_.rope) work_->rope = nn::RopeTable(cfg_.context, rope_frequencies(cfg_));
  attn_opts_.causal = cfg_.causal ? Causal::top_left : Causal::none;
  // Keys i - window < j <= i; the window's diagonal follows the causal one's
  // (bottom-right with a KV cache), so decode sees the same keys.
  if (cfg_.window > 0) attn_opts_.window = SlidingWindow{cfg_.window - 1, -1};
  attn_opts_.return_lse = true;
  // Activations come from our own forward, never from the user.
  attn_opts_.check_finite = false;
}

template <class T>
BasicGPT<T>::~BasicGPT() = default;
template <class T>
BasicGPT<T>::BasicGPT(BasicGPT&&) noexcept = default;
template <class T>
BasicGPT<T>& BasicGPT<T>::operator=(BasicGPT&&) noexcept = default;

template <class T>
const T* BasicGPT<T>::logits() const {
  return work_->logits.data();
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
    throw Error(std::string("model: compute dtype must be float32 or bfloat16, found ") + dtype_name(dtype));
  if (dtype == DType::bf16 && !std::is_same_v<T, float>)
    throw Error("model: bfloat16 compute is for the float32 model (GPT); the float64 model checks it");
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

}  // namespace

template <class T>
void BasicGPT<T>::build_params() {
  const int64_t C = cfg_.embd, F = cfg_.ffn_dim(), A = cfg_.attn_dim();
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * cfg_.head_dim();
  int64_t off = 0;
  auto add = [&](const std::string& name, Shape shape, bool decay, bool present = true) -> int64_t {
    if (!present) return -1;
    const int64_t n = shape_numel(shape);
    params_.push_back({name, std::move(shape), off, n, decay});
    off += n;
    return off - n;
  };
  Work& W = *work_;
  W.wte = add("transformer.wte.weight", {cfg_.vocab, C}, true);
  if (!cfg_.rope) W.wpe = add("transformer.wpe.weight", {cfg_.context, C}, true);
  if (cfg_.token_types) W.wtt = add("transformer.wtt.weight", {cfg_.token_types, C}, true);
  if (cfg_.embed_norm) {
    W.lne_w = add("transformer.ln_e.weight", {C}, false);
    W.lne_b = add("transformer.ln_e.bias", {C}, false, cfg_.bias);
  }
  // RMSNorm has a weight only; SwiGLU's c_fc makes the gate and the up projection.
  const bool norm_bias = cfg_.bias && !cfg_.rms_norm;
  const bool qb = cfg_.qkv_biased(), pb = cfg_.proj_biased(), mb = cfg_.mlp_biased();
  const int64_t fc_out = fc_width(cfg_);
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    typename Work::Layer L;
    L.ln1_w = add(p + "ln_1.weight", {C}, false);
    L.ln1_b = add(p + "ln_1.bias", {C}, false, norm_bias);
    L.attn_w = add(p + "attn.c_attn.weight", {qkv_out, C}, true);
    L.attn_b = add(p + "attn.c_attn.bias", {qkv_out}, false, qb);
    L.attn_proj_w = add(p + "attn.c_proj.weight", {C, A}, true);
    L.attn_proj_b = add(p + "attn.c_proj.bias", {C}, false, pb);
    L.ln2_w = add(p + "ln_2.weight", {C}, false);
    L.ln2_b = add(p + "ln_2.bias", {C}, false, norm_bias);
    L.fc_w = add(p + "mlp.c_fc.weight", {fc_out, C}, true);
    L.fc_b = add(p + "mlp.c_fc.bias", {fc_out}, false, mb);
    L.fc_proj_w = add(p + "mlp.c_proj.weight", {C, F}, true);
    L.fc_proj_b = add(p + "mlp.c_proj.bias", {C}, false, mb);
    W.layer.push_back(L);
  }
  if (cfg_.final_norm) {
    W.lnf_w = add("transformer.ln_f.weight", {C}, false);
    W.lnf_b = add("transformer.ln_f.bias", {C}, false, norm_bias);
  }
  if (cfg_.lm_head && !cfg_.tied_head) W.lm_head = add("lm_head.weight", {cfg_.vocab, C}, true);
  w_.resize(static_cast<size_t>(off));  // zeros, untouched until written; g_: by grads(), when training
  // The parameters whose gradient backward() overwrites (the Linear layers'
  // and the head's: wte's when tied; see there); every other one is zeroed
  // before it accumulates.
  std::vector<int64_t> set = {cfg_.tied_head ? W.wte : W.lm_head};
  for (const typename Work::Layer& L : W.layer)
    set.insert(set.end(), {L.attn_w, L.attn_b, L.attn_proj_w, L.attn_proj_b, L.fc_w, L.fc_b,
                           L.fc_proj_w, L.fc_proj_b});
  for (const ParamInfo& p : params_)
    if (std::find(set.begin(), set.end(), p.offset) == set.end())
      W.accumulated_grads.push_back({p.offset, p.size});
}

template <class T>
void BasicGPT<T>::init(uint64_t seed) {
  NumpyGenerator rng(seed);
  weights_written_ = true;
  matrices_in_bf16_ = matrices_mapped_ = matrices_quantized_ = false;  // every weight is written below
  work_->wte16 = nullptr;
  work_->wte32 = nullptr;
  work_->mats32.clear();
  work_->panels32 = {};
  work_->matsq.clear();
  work_->wteq = {};
  work_->quant_owned = {};
  work_->qk_paired = false;
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

// out [nb, nt, C]: the rows of a quantized embedding table at ids,
// dequantized, plus wpe's row of each position (when given).
void embed_quantized(float* out, const int32_t* ids, const Weight& wte, const float* wpe, int64_t nb, int64_t nt,
                     int64_t C) {
#pragma omp parallel for schedule(static) if (nb * nt > 1)
  for (int64_t i = 0; i < nb * nt; ++i) {
    float* o = out + i * C;
    dequantize_row(wte.type, wte.row(ids[i]), o, C);
    if (wpe)
      for (int64_t c = 0; c < C; ++c) o[c] += wpe[(i % nt) * C + c];
  }
}

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
                  int64_t C, double eps) {
  if constexpr (std::is_same_v<T, float>)
    if (!out.x16.empty())
      return nn::layernorm_forward(out.x16.data(), mean, rstd, inp, w, b, BT, C, eps);
  nn::layernorm_forward(out.x.data(), mean, rstd, inp, w, b, BT, C, eps);
}

// The block's norm: LayerNorm, or RMSNorm (rms; its models keep float32
// LinearIns, see ensure_acts, and have no bias: mean unused).
template <class In, class T>
void norm_to(In& out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int64_t BT, int64_t C,
             double eps, bool rms) {
  if (rms) return nn::rmsnorm_forward(out.x.data(), rstd, inp, w, BT, C, eps);
  layernorm_to(out, mean, rstd, inp, w, b, BT, C, eps);
}

template <class In, class T>
void gelu_to(In& out, const T* inp, int64_t N, nn::Gelu form) {
  if constexpr (std::is_same_v<T, float>)
    if (!out.x16.empty()) return nn::gelu_forward(out.x16.data(), inp, N, form);
  nn::gelu_forward(out.x.data(), inp, N, form);
}

// A Linear layer's weight [OC, C]: in the flat buffer (w); or, when set,
// as the GEMM reads it instead: rounded to bf16 (bf16 compute, Work::mats16)
// or where a mapped float32 checkpoint holds it (Work::mats32), or
// quantized (Work::matsq).
template <class T>
struct LinearWeight {
  const T* w;
  const Bf16Matrix* w16 = nullptr;
  const RowRuns<T>* w32 = nullptr;
  const std::vector<Weight>* wq = nullptr;
};

// out [BT, OC] = inp [BT, C] · wᵀ + b.
template <class T, class TI>
void linear_to(T* out, const TI* inp, const LinearWeight<T>& lw, const T* b, int64_t BT, int64_t C,
               int64_t OC, nn::Matmul matmul) {
  if constexpr (std::is_same_v<T, float>) {
    if (lw.w16) return linear_runs(out, inp, *lw.w16, b, BT, C, OC);
    if constexpr (std::is_same_v<TI, float>) {
      if (lw.w32) return linear_runs(out, inp, *lw.w32, b, BT, C, OC);
      if (lw.wq) return linear_runs(out, inp, *lw.wq, b, BT, C, OC);
    }
  }
  const T* w = lw.w;
  if constexpr (std::is_same_v<TI, bfloat16>) nn::linear_forward(out, inp, w, b, BT, C, OC);
  else nn::linear_forward(out, inp, w, b, BT, C, OC, nn::WeightLayout::out_in, matmul);
}

template <class In, class T>
void linear_from(T* out, const In& in, const LinearWeight<T>& lw, const T* b, int64_t BT, int64_t C,
                 int64_t OC, nn::Matmul matmul) {
  if constexpr (std::is_same_v<T, float>)
    if (!in.x16.empty()) return linear_to(out, in.x16.data(), lw, b, BT, C, OC, matmul);
  linear_to(out, in.x.data(), lw, b, BT, C, OC, matmul);
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

// Sizes w's activations for `rows` rows of tokens, attention on [B, T],
// under `compute` (f32 or bf16: what its pre-norm LinearIns hold); a call
// of the shape the last one had keeps them. Buffers are resized in place,
// so that a shape met before (generation's prefill, then its one-token
// steps, then the next prefill) reuses memory already mapped; the loss's
// probabilities [BT, V] and the backward's buffers, the largest, are sized
// by the calls that use them (forward with targets, backward).
template <class W>
void ensure_acts(W& w, const GPTConfig& cfg, int64_t B, int64_t Tn, int64_t rows, DType compute,
                 bool all_layers) {
  using T = typename W::Vec::value_type;
  typename W::Acts& a = w.acts;
  const size_t sets = all_layers ? static_cast<size_t>(cfg.layers) : 1;
  if (a.B == B && a.Tn == Tn && a.rows == rows && a.compute == compute && a.layers.size() == sets) return;
  // Post-norm's normalised rows are the residual stream too: float32; and
  // RMSNorm and SwiGLU write float32 only (their products still run in bf16).
  const bool bf16 = compute == DType::bf16 && !cfg.post_norm && !cfg.rms_norm && !cfg.swiglu;
  const int64_t BT = rows, C = cfg.embd, F = cfg.ffn_dim(), hs = cfg.head_dim();
  const int64_t fc_out = fc_width(cfg);
  const int64_t H = cfg.heads, Hkv = cfg.kv_heads, qkv_out = (H + 2 * Hkv) * hs;
  const DType dt = dtype_of<T>();
  a.B = B, a.Tn = Tn, a.rows = rows, a.compute = compute;
  a.tokens.assign(BT, 0), a.targets.assign(BT, 0);
  a.encoded.assign(BT * C, T(0));
  a.emb_mean.assign(cfg.embed_norm ? BT : 0, T(0)), a.emb_rstd.assign(cfg.embed_norm ? BT : 0, T(0));
  a.layers.resize(sets);
  for (typename W::LayerActs& l : a.layers) {
    size_input(l.ln1, BT * C, bf16), l.ln1_mean.assign(BT, T(0)), l.ln1_rstd.assign(BT, T(0));
    l.qkv.assign(BT * qkv_out, T(0));
    l.q = Tensor(dt, {B, H, Tn, hs});
    l.k = Tensor(dt, {B, Hkv, Tn, hs});
    l.v = Tensor(dt, {B, Hkv, Tn, hs});
    l.atty.assign(BT * cfg.attn_dim(), T(0)), l.res2.assign(BT * C, T(0));
    size_input(l.ln2, BT * C, bf16);
    l.ln2_mean.assign(BT, T(0)), l.ln2_rstd.assign(BT, T(0));
    l.fch.assign(BT * fc_out, T(0)), size_input(l.fch_gelu, BT * F, bf16);
    l.res3.assign(BT * C, T(0));
  }
  const int64_t lnf_rows = cfg.final_norm ? BT : 0;
  size_input(a.lnf, lnf_rows * C, bf16 && cfg.lm_head);  // without a head: the output, float32
  a.lnf_mean.assign(lnf_rows, T(0)), a.lnf_rstd.assign(lnf_rows, T(0));
  a.losses.assign(BT, T(0));
}

// The backward's buffers for the activations' shape (a no-op when they have
// it). Each is overwritten, or zeroed, before it is read.
template <class W>
void ensure_grads(W& w, const GPTConfig& cfg) {
  using T = typename W::Vec::value_type;
  const typename W::Acts& a = w.acts;
  const int64_t BT = a.rows, C = cfg.embd, F = cfg.ffn_dim(), V = cfg.vocab, hs = cfg.head_dim();
  const int64_t qkv_out = (cfg.heads + 2 * cfg.kv_heads) * hs;
  // datty: the merged heads' gradient [BT, A], and post-norm's [BT, C].
  const int64_t datty = BT * std::max(cfg.attn_dim(), C);
  for (auto [v, n] : {std::pair{&w.dres, BT * C}, {&w.dln, BT * C}, {&w.dqkv, BT * qkv_out}, {&w.datty, datty},
                      {&w.dfch, BT * fc_width(cfg)}, {&w.dfch_gelu, BT * F}, {&w.dlogits, BT * V}})
    v->resize(static_cast<size_t>(n));
  const Shape dout{a.B, cfg.heads, a.Tn, hs};
  if (w.dout.shape() != dout) w.dout = Tensor(dtype_of<T>(), dout);
}

}  // namespace

template <class T>
void BasicGPT<T>::run(const int32_t* tokens, int64_t B, int64_t Tn, std::span<KVCache* const> caches,
                      std::span<const int64_t> lengths, bool for_backward) {
  Work& W = *work_;
  // Under bf16 compute the Linear products run in bf16 here too; with a
  // KV cache, attention reads the cache's float32 keys and values.
  // A quantized model's products are weight_matmul's, on float32 inputs.
  const DType compute = matrices_quantized_ ? DType::f32 : compute_;
  const nn::Matmul mm = matmul_for(compute);
  const bool packed = !lengths.empty(), cached = !caches.empty();
  int64_t rows = B * Tn;
  if (packed) rows = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  ensure_acts(W, cfg_, B, Tn, rows, compute, for_backward || W.keep_all_layers);
  auto& a = W.acts;
  const int64_t BT = rows, C = cfg_.embd, F = cfg_.ffn_dim(), V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * hs, A = cfg_.attn_dim();
  const double eps = cfg_.norm_eps;
  const int64_t fc_out = fc_width(cfg_);
  // The matrices as the GEMMs read them, block l's four from 4 l, then the
  // head: bf16 (bf16 compute), or mapped float32.
  const Bf16Matrix* m16 = nullptr;
  const RowRuns<T>* m32 = matrices_mapped_ ? W.mats32.data() : nullptr;
  const std::vector<Weight>* mq = matrices_quantized_ ? W.matsq.data() : nullptr;
  if (compute != DType::bf16 && !matrices_mapped_ && !matrices_quantized_)
    widen_matrices();  // float32 products need float32 matrices
  if constexpr (std::is_same_v<T, float>) {
    if (compute == DType::bf16) {
      if (weights_written_ || W.mats16.empty()) round_matrices();
      weights_written_ = false;
      m16 = W.mats16.data();
      m32 = nullptr;
    }
  }
  // Block l's matrix j: c_attn, c_proj, c_fc ([2F, C] for SwiGLU), mlp.c_proj;
  // j = 0 of block `layers` is the head.
  auto lw = [&](int64_t l, int j, int64_t offset) {
    return LinearWeight<T>{w(offset), m16 ? m16 + 4 * l + j : nullptr, m32 ? m32 + 4 * l + j : nullptr,
                           mq ? mq + 4 * l + j : nullptr};
  };
  for (int64_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V)
      throw Error("model: token id " + std::to_string(tokens[i]) + " outside the vocabulary [0, " +
                  std::to_string(V) + ")");
    a.tokens[i] = tokens[i];
  }
  a.lengths.assign(lengths.begin(), lengths.end());
  a.starts.assign(lengths.size(), 0);
  for (size_t i = 1; i < lengths.size(); ++i) a.starts[i] = a.starts[i - 1] + lengths[i - 1];
  W.has_targets = false;
  // Learned positions: wpe's rows from the sequence's first position on.
  auto wpe = [&](int64_t pos0) { return W.wpe >= 0 ? w(W.wpe + pos0 * C) : nullptr; };
  // A table held only where a mapped file holds it (bf16 or float32) is read there.
  auto embed = [&](T* out, const int32_t* ids, int64_t nb, int64_t nt, const T* pos_rows) {
    if constexpr (std::is_same_v<T, float>) {
      if (W.wte16) return nn::embedding_forward(out, ids, W.wte16, pos_rows, nb, nt, C);
      if (matrices_quantized_) return embed_quantized(out, ids, W.wteq, pos_rows, nb, nt, C);
    }
    nn::embedding_forward(out, ids, W.wte32 ? W.wte32 : w(W.wte), pos_rows, nb, nt, C);
  };
  if (packed) {
    for (int64_t b = 0; b < B; ++b)
      embed(a.encoded.data() + a.starts[b] * C, a.tokens.data() + a.starts[b], 1, a.lengths[b], wpe(0));
  } else if (cached) {
    for (int64_t b = 0; b < B; ++b)
      embed(a.encoded.data() + b * Tn * C, a.tokens.data() + b * Tn, 1, Tn, wpe(caches[b]->len_));
  } else {
    embed(a.encoded.data(), a.tokens.data(), B, Tn, wpe(0));
  }
  if (W.wtt >= 0) {
    // Every token is of type 0 (one segment): its row is added to each.
    const T* type0 = w(W.wtt);
    for (int64_t i = 0; i < BT; ++i)
      for (int64_t c = 0; c < C; ++c) a.encoded[i * C + c] += type0[c];
  }
  if (cfg_.embed_norm)  // in place: each row's statistics are taken before it is written
    nn::layernorm_forward(a.encoded.data(), a.emb_mean.data(), a.emb_rstd.data(), a.encoded.data(),
                          w(W.lne_w), w(W.lne_b), BT, C, eps);
  const T* x = a.encoded.data();
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const typename Work::Layer& L = W.layer[l];
    auto& la = W.layer_acts(l);
    if (cfg_.post_norm) {
      // x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)).
      linear_to(la.qkv.data(), x, lw(l, 0, L.attn_w), w(L.attn_b), BT, C, qkv_out, mm);
    } else {
      norm_to(la.ln1, la.ln1_mean.data(), la.ln1_rstd.data(), x, w(L.ln1_w), w(L.ln1_b), BT, C, eps,
              cfg_.rms_norm);
      linear_from(la.qkv.data(), la.ln1, lw(l, 0, L.attn_w), w(L.attn_b), BT, C, qkv_out, mm);
    }
    if (packed) packed_attention_forward(l);
    else attention_forward(l, caches);
    // With caches only each sequence's last position's next token is
    // wanted: the last block's keys and values are needed at every position
    // (they go into the cache), the rest of it only at the last rows, the
    // last B (B = 1, or T = 1 where every row is a last one). The stream's
    // rows (atty, res2, res3) keep their places, the MLP's rows start at 0.
    // A post-norm block writes its stream into ln1 and ln2, rows from 0: it
    // runs every row.
    const bool last_rows_only = cached && l == cfg_.layers - 1 && !cfg_.post_norm;
    const int64_t r0 = last_rows_only ? BT - B : 0, n = BT - r0;
    T* res2 = la.res2.data() + r0 * C;
    // res2 = x + attn proj: project into res2, then add the stream.
    linear_to(res2, la.atty.data() + r0 * A, lw(l, 1, L.attn_proj_w), w(L.attn_proj_b), n, A, C, mm);
    nn::residual_forward(res2, res2, x + r0 * C, n * C);
    // The MLP's input, which post-norm also adds back.
    const typename Work::LinearIn* mlp_in = &la.ln2;
    const T* mlp_res = res2;
    if (cfg_.post_norm) {
      layernorm_to(la.ln1, la.ln1_mean.data(), la.ln1_rstd.data(), res2, w(L.ln1_w), w(L.ln1_b), n,
                   C, eps);
      mlp_in = &la.ln1;
      mlp_res = la.ln1.x.data();
    } else {
      norm_to(la.ln2, la.ln2_mean.data(), la.ln2_rstd.data(), res2, w(L.ln2_w), w(L.ln2_b), n, C, eps,
              cfg_.rms_norm);
    }
    linear_from(la.fch.data(), *mlp_in, lw(l, 2, L.fc_w), w(L.fc_b), n, C, fc_out, mm);
    if (cfg_.swiglu) nn::swiglu_forward(la.fch_gelu.x.data(), la.fch.data(), n, F);
    else gelu_to(la.fch_gelu, la.fch.data(), n * F, cfg_.gelu);
    // Post-norm keeps the sum, ln_2's input, for the backward (in ln2.x).
    T* sum = cfg_.post_norm ? la.ln2.x.data() : la.res3.data() + r0 * C;
    linear_from(sum, la.fch_gelu, lw(l, 3, L.fc_proj_w), w(L.fc_proj_b), n, F, C, mm);
    nn::residual_forward(sum, sum, mlp_res, n * C);
    if (cfg_.post_norm)
      nn::layernorm_forward(la.res3.data(), la.ln2_mean.data(), la.ln2_rstd.data(), sum, w(L.ln2_w),
                            w(L.ln2_b), BT, C, eps);
    x = la.res3.data();
  }
  W.hidden = x;
  if (!cfg_.final_norm && !cfg_.lm_head) return;
  // With caches only each sequence's last position's next token is wanted.
  const int64_t rows_out = cached ? B : BT, first = BT - rows_out;
  if (cfg_.final_norm) {
    norm_to(a.lnf, a.lnf_mean.data(), a.lnf_rstd.data(), x + first * C, w(W.lnf_w), w(W.lnf_b),
            rows_out, C, eps, cfg_.rms_norm);
    // ln_f's rows in float32 (a model without a head keeps them so), or none.
    W.hidden = cached || a.lnf.x.empty() ? nullptr : a.lnf.x.data();
  }
  if (!cfg_.lm_head) return;
  W.logits.resize(static_cast<size_t>(rows_out * V));
  linear_from(W.logits.data(), a.lnf, lw(cfg_.layers, 0, cfg_.tied_head ? W.wte : W.lm_head),
              static_cast<const T*>(nullptr), rows_out, C, V, mm);
}

template <class T>
std::span<const T> BasicGPT<T>::hidden_states(const int32_t* tokens,
                                              std::span<const int64_t> lengths) {
  const ThreadScope threads(attn_opts_.threads);
  if (lengths.empty()) throw Error("model: hidden_states needs at least one sequence");
  int64_t longest = 0, rows = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1 || lengths[i] > cfg_.context)
      throw Error("model: sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                  " tokens; the model takes 1 to " + std::to_string(cfg_.context) +
                  " (its positions)");
    longest = std::max(longest, lengths[i]);
    rows += lengths[i];
  }
  run(tokens, static_cast<int64_t>(lengths.size()), longest, {}, lengths);
  if (!work_->hidden)
    throw Error("model: under bfloat16 compute ln_f's output is bfloat16; hidden states need float32");
  return {work_->hidden, static_cast<size_t>(rows * cfg_.embd)};
}

template <class T>
T BasicGPT<T>::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t Tn) {
  const ThreadScope threads(attn_opts_.threads);
  if (!cfg_.lm_head)
    throw Error("model: this model has no language-model head (an encoder): use hidden_states");
  if (B < 1) throw Error("model: expected at least one sequence, found " + std::to_string(B));
  if (Tn < 1 || Tn > cfg_.context)
    throw Error("model: a sequence of " + std::to_string(Tn) + " tokens; the model takes 1 to " +
                std::to_string(cfg_.context) + " (its context)");
  run(tokens, B, Tn, {}, {}, targets != nullptr);
  if (!targets) return T(0);
  Work& W = *work_;
  auto& a = W.acts;
  const int64_t BT = B * Tn, V = cfg_.vocab;
  for (int64_t i = 0; i < BT; ++i) {
    if (targets[i] < 0 || targets[i] >= V)
      throw Error("model: target id " + std::to_string(targets[i]) + " outside the vocabulary");
    a.targets[i] = targets[i];
  }
  W.has_targets = true;
  a.probs.resize(static_cast<size_t>(BT * V));  // every element written below
  nn::crossentropy_forward(a.losses.data(), a.probs.data(), W.logits.data(), a.targets.data(), BT, V);
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
  return static_cast<T>(sum / static_cast<double>(BT));
}

template <class T>
void BasicGPT<T>::backward() {
  const ThreadScope threads(attn_opts_.threads);
  Work& W = *work_;
  if (!W.has_targets) throw Error("model: backward needs a forward with targets");
  // has_targets implies an lm_head; BERT's token types and embedding norm have no backward.
  if (!cfg_.trainable())
    throw Error("model: training runs language models with a final norm and a head, without token types "
                "or an embedding norm");
  ensure_grads(W, cfg_);
  grads();
  widen_matrices();  // the input gradients' products read the float32 matrices
  auto& a = W.acts;
  const int64_t B = a.B, Tn = a.Tn, BT = B * Tn, C = cfg_.embd, F = cfg_.ffn_dim(), V = cfg_.vocab;
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * cfg_.head_dim();
  const int64_t fc_out = fc_width(cfg_);
  // Each Linear's weight and bias gradients are overwritten by their only
  // producer (a tied wte's by the head first; the embedding adds to it last):
  // only the other parameters' gradients start from zero.
  for (const auto& [off, n] : W.accumulated_grads)
    std::fill(g_.begin() + off, g_.begin() + off + n, T(0));
  zero(W.dlogits);
  nn::crossentropy_backward(W.dlogits.data(), a.probs.data(), a.targets.data(),
                            T(1) / static_cast<T>(BT), BT, V);
  // W.dres carries dLoss/d(residual stream) down through the blocks: it sums
  // two consumers per block, so it accumulates from zero. W.dln, W.datty,
  // W.dfch and W.dfch_gelu each have one producer before each read, which
  // overwrites them (no zeroing: the backward used to clear ~20 MB per step).
  constexpr nn::Grad kSet = nn::Grad::overwrite;
  // The GEMMs of the compute dtype the forward ran in (its LinearIns hold it).
  const nn::Matmul mm = matmul_for(a.compute);
  // dinp += the norm's input gradient from dout = W.dln: LayerNorm or RMSNorm.
  auto norm_back = [&](T* dinp, int64_t nw, int64_t nb, const T* x, const T* mean, const T* rstd) {
    if (cfg_.rms_norm) nn::rmsnorm_backward(dinp, g(nw), W.dln.data(), x, w(nw), rstd, BT, C);
    else nn::layernorm_backward(dinp, g(nw), g(nb), W.dln.data(), x, w(nw), mean, rstd, BT, C);
  };
  zero(W.dres);
  const int64_t head = cfg_.tied_head ? W.wte : W.lm_head;
  linear_back_from(W.dln.data(), g(head), static_cast<T*>(nullptr), W.dlogits.data(), a.lnf, w(head), BT,
                   C, V, mm);
  const T* x_last = cfg_.layers ? a.layers.back().res3.data() : a.encoded.data();
  norm_back(W.dres.data(), W.lnf_w, W.lnf_b, x_last, a.lnf_mean.data(), a.lnf_rstd.data());
  // The MLP's backward from dout [BT, C] to its input's gradient dinp
  // (overwritten), block L's activations la.
  auto mlp_back = [&](T* dinp, const T* dout, const typename Work::Layer& L,
                      const typename Work::LayerActs& la, const typename Work::LinearIn& in) {
    linear_back_from(W.dfch_gelu.data(), g(L.fc_proj_w), g(L.fc_proj_b), dout, la.fch_gelu, w(L.fc_proj_w),
                     BT, F, C, mm);
    if (cfg_.swiglu) nn::swiglu_backward(W.dfch.data(), la.fch.data(), W.dfch_gelu.data(), BT, F);
    else nn::gelu_backward(W.dfch.data(), la.fch.data(), W.dfch_gelu.data(), BT * F, cfg_.gelu, kSet);
    linear_back_from(dinp, g(L.fc_w), g(L.fc_b), W.dfch.data(), in, w(L.fc_w), BT, C, fc_out, mm);
  };
  for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const typename Work::Layer& L = W.layer[l];
    auto& la = a.layers[l];
    const T* x = l ? a.layers[l - 1].res3.data() : a.encoded.data();
    if (cfg_.post_norm) {
      // y = ln_2(s), s = h + mlp(h), h = ln_1(r), r = x + proj(attn(x)): from
      // dres = dL/dy to dL/dr, through dL/ds (dln) and dL/dh (datty).
      zero(W.dln);
      nn::layernorm_backward(W.dln.data(), g(L.ln2_w), g(L.ln2_b), W.dres.data(), la.ln2.x.data(),
                             w(L.ln2_w), la.ln2_mean.data(), la.ln2_rstd.data(), BT, C);
      mlp_back(W.datty.data(), W.dln.data(), L, la, la.ln1);
      nn::residual_forward(W.datty.data(), W.datty.data(), W.dln.data(), BT * C);
      zero(W.dres);
      nn::layernorm_backward(W.dres.data(), g(L.ln1_w), g(L.ln1_b), W.datty.data(), la.res2.data(),
                             w(L.ln1_w), la.ln1_mean.data(), la.ln1_rstd.data(), BT, C);
    } else {
      // res3 = res2 + mlp(ln2(res2)): dres flows to res2 directly and through the MLP.
      mlp_back(W.dln.data(), W.dres.data(), L, la, la.ln2);
      norm_back(W.dres.data(), L.ln2_w, L.ln2_b, la.res2.data(), la.ln2_mean.data(), la.ln2_rstd.data());
    }
    // res2 = x + proj(attn(c_attn(x))), x normalised first (pre-norm) or not.
    nn::linear_backward(W.datty.data(), g(L.attn_proj_w), g(L.attn_proj_b), W.dres.data(),
                        la.atty.data(), w(L.attn_proj_w), BT, cfg_.attn_dim(), C, mm, kSet, kSet);
    attention_backward(l);
    if (cfg_.post_norm) {
      nn::linear_backward(W.dln.data(), g(L.attn_w), g(L.attn_b), W.dqkv.data(), x, w(L.attn_w), BT, C,
                          qkv_out, mm, kSet, kSet);
      nn::residual_forward(W.dres.data(), W.dres.data(), W.dln.data(), BT * C);
    } else {
      linear_back_from(W.dln.data(), g(L.attn_w), g(L.attn_b), W.dqkv.data(), la.ln1, w(L.attn_w), BT,
                       C, qkv_out, mm);
      norm_back(W.dres.data(), L.ln1_w, L.ln1_b, x, la.ln1_mean.data(), la.ln1_rstd.data());
    }
  }
  nn::embedding_backward(g(W.wte), g(W.wpe), W.dres.data(), a.tokens.data(), B, Tn, C);
}

template class BasicGPT<float>;
template class BasicGPT<double>;

}  // namespace qkv
