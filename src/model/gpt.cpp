// gpt.cpp: the model's parameters, forward and backward, block by block.
#include "qkv/gpt.h"

#include <algorithm>
#include <cmath>

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
  need(heads >= 1 && embd % heads == 0,
       "heads must divide embd " + std::to_string(embd) + ", found " + std::to_string(heads));
  need(kv_heads >= 1 && heads % kv_heads == 0,
       "kv_heads must divide heads " + std::to_string(heads) + ", found " + std::to_string(kv_heads));
  need(!rope || head_dim() % 2 == 0,
       "rope needs an even head dim, found embd / heads = " + std::to_string(head_dim()));
}

GPT::GPT(const GPTConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  build_params();
  attn_opts_.causal = Causal::top_left;
  attn_opts_.return_lse = true;
  // Activations come from our own forward, never from the user.
  attn_opts_.check_finite = false;
}

void GPT::set_attention(Kernel kernel, int threads) {
  attn_opts_.kernel = kernel;
  attn_opts_.threads = threads;
}

void GPT::build_params() {
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
  w_.assign(static_cast<size_t>(off), 0.0f);
  g_.assign(static_cast<size_t>(off), 0.0f);
}

void GPT::init(uint64_t seed) {
  NumpyGenerator rng(seed);
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.layers));
  for (const ParamInfo& p : params_) {
    float* x = w_.data() + p.offset;
    const bool is_norm = p.name.find(".ln_") != std::string::npos;
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      std::fill(x, x + p.size, 0.0f);
    } else if (is_norm) {
      std::fill(x, x + p.size, 1.0f);
    } else {
      // nanoGPT scales the init of the projections that write into the
      // residual stream by 1/sqrt(2L), so the stream's variance does not grow
      // with depth.
      const bool resid = p.name.find("c_proj.weight") != std::string::npos;
      const double sd = resid ? resid_std : 0.02;
      for (int64_t i = 0; i < p.size; ++i) x[i] = static_cast<float>(rng.normal(0.0, sd));
    }
  }
}

void GPT::ensure_acts(int64_t B, int64_t T) {
  if (acts_.B == B && acts_.T == T) return;
  const int64_t BT = B * T, C = cfg_.embd, V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t H = cfg_.heads, Hkv = cfg_.kv_heads, qkv_out = (H + 2 * Hkv) * hs;
  Acts& a = acts_;
  a.B = B, a.T = T;
  a.tokens.assign(BT, 0), a.targets.assign(BT, 0);
  a.encoded.assign(BT * C, 0.0f);
  a.layers.assign(cfg_.layers, LayerActs{});
  for (LayerActs& l : a.layers) {
    l.ln1.assign(BT * C, 0.0f), l.ln1_mean.assign(BT, 0.0f), l.ln1_rstd.assign(BT, 0.0f);
    l.qkv.assign(BT * qkv_out, 0.0f);
    l.q = Tensor(DType::f32, {B, H, T, hs});
    l.k = Tensor(DType::f32, {B, Hkv, T, hs});
    l.v = Tensor(DType::f32, {B, Hkv, T, hs});
    l.atty.assign(BT * C, 0.0f), l.res2.assign(BT * C, 0.0f);
    l.ln2.assign(BT * C, 0.0f), l.ln2_mean.assign(BT, 0.0f), l.ln2_rstd.assign(BT, 0.0f);
    l.fch.assign(BT * 4 * C, 0.0f), l.fch_gelu.assign(BT * 4 * C, 0.0f);
    l.res3.assign(BT * C, 0.0f);
  }
  a.lnf.assign(BT * C, 0.0f), a.lnf_mean.assign(BT, 0.0f), a.lnf_rstd.assign(BT, 0.0f);
  a.probs.assign(BT * V, 0.0f), a.losses.assign(BT, 0.0f);
  logits_.assign(BT * V, 0.0f);
  dres_.assign(BT * C, 0.0f), dln_.assign(BT * C, 0.0f), dqkv_.assign(BT * qkv_out, 0.0f);
  datty_.assign(BT * C, 0.0f), dfch_.assign(BT * 4 * C, 0.0f), dfch_gelu_.assign(BT * 4 * C, 0.0f);
  dlogits_.assign(BT * V, 0.0f);
  dout_ = Tensor(DType::f32, {B, H, T, hs});
}

namespace {

// Rotates one head vector r [hs] at position t by RoPE's angles, half-split
// pairs (i, i + hs/2) as in qkv/positional.h; sign -1 rotates back (the
// backward of a rotation is its inverse).
void rope_vec(float* r, int64_t hs, int64_t t, double sign) {
  const int64_t half = hs / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double th = static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / hs);
    const float c = static_cast<float>(std::cos(th)), s = static_cast<float>(sign * std::sin(th));
    const float a = r[i], b = r[i + half];
    r[i] = a * c - b * s;
    r[i + half] = a * s + b * c;
  }
}

// RoPE on x [B, H, T, hs] in place.
void rope(Tensor& x, double sign) {
  const int64_t BH = x.dim(0) * x.dim(1), T = x.dim(2), hs = x.dim(3);
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t t = 0; t < T; ++t) rope_vec(x.data<float>() + (bh * T + t) * hs, hs, t, sign);
}

// RoPE on `heads` consecutive head vectors [heads, hs], all at position t.
void rope_row(float* x, int64_t heads, int64_t hs, int64_t t) {
  for (int64_t h = 0; h < heads; ++h) rope_vec(x + h * hs, hs, t, 1.0);
}

// qkv [B, T, (H + 2 Hkv) hs] -> q [B, H, T, hs], k, v [B, Hkv, T, hs] (dir = +1),
// or the gradients back (dir = -1).
void split_qkv(float* qkv, Tensor& q, Tensor& k, Tensor& v, int dir) {
  const int64_t B = q.dim(0), H = q.dim(1), T = q.dim(2), hs = q.dim(3), Hkv = k.dim(1);
  const int64_t row = (H + 2 * Hkv) * hs;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      float* src = qkv + (b * T + t) * row;
      auto move = [&](Tensor& dst, int64_t heads, int64_t col0) {
        for (int64_t h = 0; h < heads; ++h) {
          float* d = dst.data<float>() + ((b * heads + h) * T + t) * hs;
          float* s = src + col0 + h * hs;
          for (int64_t e = 0; e < hs; ++e) {
            if (dir > 0) d[e] = s[e];
            else s[e] = d[e];
          }
        }
      };
      move(q, H, 0);
      move(k, Hkv, H * hs);
      move(v, Hkv, (H + Hkv) * hs);
    }
}

// out [B, H, T, hs] <-> atty [B, T, H hs] (dir = +1 merges heads, -1 splits).
void merge_heads(const Tensor& out_c, float* atty, Tensor& grad, int dir) {
  const int64_t B = out_c.dim(0), H = out_c.dim(1), T = out_c.dim(2), hs = out_c.dim(3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        float* y = atty + (b * T + t) * H * hs + h * hs;
        const int64_t o = ((b * H + h) * T + t) * hs;
        for (int64_t e = 0; e < hs; ++e) {
          if (dir > 0) y[e] = out_c.data<float>()[o + e];
          else grad.data<float>()[o + e] = y[e];
        }
      }
}

}  // namespace

void GPT::attention_forward(LayerActs& a) {
  split_qkv(a.qkv.data(), a.q, a.k, a.v, +1);
  if (cfg_.rope) rope(a.q, 1.0), rope(a.k, 1.0);
  attention_into(a.att, a.q, a.k, a.v, attn_opts_);
  merge_heads(a.att.out, a.atty.data(), dout_, +1);
}

void GPT::attention_backward(LayerActs& a) {
  merge_heads(a.att.out, datty_.data(), dout_, -1);  // datty -> dout [B, H, T, hs]
  attention_backward_into(dattn_, a.q, a.k, a.v, a.att.out, a.att.lse, dout_, attn_opts_);
  if (cfg_.rope) rope(dattn_.dq, -1.0), rope(dattn_.dk, -1.0);
  split_qkv(dqkv_.data(), dattn_.dq, dattn_.dk, dattn_.dv, -1);
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  if (B < 1 || T < 1 || T > cfg_.context)
    throw Error("gpt: expected 1 <= T <= context " + std::to_string(cfg_.context) +
                " and B >= 1, found B = " + std::to_string(B) + ", T = " + std::to_string(T));
  ensure_acts(B, T);
  Acts& a = acts_;
  const int64_t BT = B * T, C = cfg_.embd, V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * hs;
  for (int64_t i = 0; i < BT; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V)
      throw Error("gpt: token id " + std::to_string(tokens[i]) + " outside the vocabulary [0, " +
                  std::to_string(V) + ")");
    a.tokens[i] = tokens[i];
  }
  nn::embedding_forward(a.encoded.data(), a.tokens.data(), w(wte_), w(wpe_), B, T, C);
  const float* x = a.encoded.data();
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    const Layer& L = layer_[l];
    LayerActs& la = a.layers[l];
    nn::layernorm_forward(la.ln1.data(), la.ln1_mean.data(), la.ln1_rstd.data(), x, w(L.ln1_w),
                          w(L.ln1_b), BT, C);
    nn::linear_forward(la.qkv.data(), la.ln1.data(), w(L.attn_w), w(L.attn_b), BT, C, qkv_out);
    attention_forward(la);
    // res2 = x + attn proj: project into res2, then add the stream.
    nn::linear_forward(la.res2.data(), la.atty.data(), w(L.attn_proj_w), w(L.attn_proj_b), BT, C, C);
    nn::residual_forward(la.res2.data(), la.res2.data(), x, BT * C);
    nn::layernorm_forward(la.ln2.data(), la.ln2_mean.data(), la.ln2_rstd.data(), la.res2.data(),
                          w(L.ln2_w), w(L.ln2_b), BT, C);
    nn::linear_forward(la.fch.data(), la.ln2.data(), w(L.fc_w), w(L.fc_b), BT, C, 4 * C);
    nn::gelu_forward(la.fch_gelu.data(), la.fch.data(), BT * 4 * C);
    nn::linear_forward(la.res3.data(), la.fch_gelu.data(), w(L.fc_proj_w), w(L.fc_proj_b), BT,
                       4 * C, C);
    nn::residual_forward(la.res3.data(), la.res3.data(), la.res2.data(), BT * C);
    x = la.res3.data();
  }
  nn::layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, w(lnf_w_),
                        w(lnf_b_), BT, C);
  nn::linear_forward<float>(logits_.data(), a.lnf.data(), w(wte_), nullptr, BT, C, V);  // tied head
  has_targets_ = targets != nullptr;
  if (!has_targets_) return 0.0f;
  for (int64_t i = 0; i < BT; ++i) {
    if (targets[i] < 0 || targets[i] >= V)
      throw Error("gpt: target id " + std::to_string(targets[i]) + " outside the vocabulary");
    a.targets[i] = targets[i];
  }
  nn::crossentropy_forward(a.losses.data(), a.probs.data(), logits_.data(), a.targets.data(), BT, V);
  double sum = 0.0;
  for (int64_t i = 0; i < BT; ++i) sum += a.losses[i];
  return static_cast<float>(sum / static_cast<double>(BT));
}

void GPT::backward() {
  if (!has_targets_) throw Error("gpt: backward needs a forward with targets");
  Acts& a = acts_;
  const int64_t B = a.B, T = a.T, BT = B * T, C = cfg_.embd, V = cfg_.vocab;
  const int64_t qkv_out = (cfg_.heads + 2 * cfg_.kv_heads) * cfg_.head_dim();
  std::fill(g_.begin(), g_.end(), 0.0f);
  std::fill(dlogits_.begin(), dlogits_.end(), 0.0f);
  nn::crossentropy_backward(dlogits_.data(), a.probs.data(), a.targets.data(),
                            1.0f / static_cast<float>(BT), BT, V);
  // dres_ carries dLoss/d(residual stream) down through the blocks.
  std::fill(dres_.begin(), dres_.end(), 0.0f);
  std::fill(dln_.begin(), dln_.end(), 0.0f);
  nn::linear_backward<float>(dln_.data(), g(wte_), nullptr, dlogits_.data(), a.lnf.data(), w(wte_), BT, C, V);
  const float* x_last = cfg_.layers ? a.layers.back().res3.data() : a.encoded.data();
  nn::layernorm_backward(dres_.data(), g(lnf_w_), g(lnf_b_), dln_.data(), x_last, w(lnf_w_),
                         a.lnf_mean.data(), a.lnf_rstd.data(), BT, C);
  for (int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const Layer& L = layer_[l];
    LayerActs& la = a.layers[l];
    const float* x = l ? a.layers[l - 1].res3.data() : a.encoded.data();
    // res3 = res2 + mlp(ln2(res2)): dres flows to res2 directly and through the MLP.
    std::fill(dfch_gelu_.begin(), dfch_gelu_.end(), 0.0f);
    nn::linear_backward(dfch_gelu_.data(), g(L.fc_proj_w), g(L.fc_proj_b), dres_.data(),
                        la.fch_gelu.data(), w(L.fc_proj_w), BT, 4 * C, C);
    std::fill(dfch_.begin(), dfch_.end(), 0.0f);
    nn::gelu_backward(dfch_.data(), la.fch.data(), dfch_gelu_.data(), BT * 4 * C);
    std::fill(dln_.begin(), dln_.end(), 0.0f);
    nn::linear_backward(dln_.data(), g(L.fc_w), g(L.fc_b), dfch_.data(), la.ln2.data(), w(L.fc_w),
                        BT, C, 4 * C);
    nn::layernorm_backward(dres_.data(), g(L.ln2_w), g(L.ln2_b), dln_.data(), la.res2.data(),
                           w(L.ln2_w), la.ln2_mean.data(), la.ln2_rstd.data(), BT, C);
    // res2 = x + proj(attn(ln1(x))).
    std::fill(datty_.begin(), datty_.end(), 0.0f);
    nn::linear_backward(datty_.data(), g(L.attn_proj_w), g(L.attn_proj_b), dres_.data(),
                        la.atty.data(), w(L.attn_proj_w), BT, C, C);
    attention_backward(la);
    std::fill(dln_.begin(), dln_.end(), 0.0f);
    nn::linear_backward(dln_.data(), g(L.attn_w), g(L.attn_b), dqkv_.data(), la.ln1.data(),
                        w(L.attn_w), BT, C, qkv_out);
    nn::layernorm_backward(dres_.data(), g(L.ln1_w), g(L.ln1_b), dln_.data(), x, w(L.ln1_w),
                           la.ln1_mean.data(), la.ln1_rstd.data(), BT, C);
  }
  nn::embedding_backward(g(wte_), g(wpe_), dres_.data(), a.tokens.data(), B, T, C);
}

KVCache GPT::new_cache() const {
  KVCache c;
  for (int64_t l = 0; l < cfg_.layers; ++l) {
    c.k.emplace_back(DType::f32, Shape{1, cfg_.kv_heads, cfg_.context, cfg_.head_dim()});
    c.v.emplace_back(DType::f32, Shape{1, cfg_.kv_heads, cfg_.context, cfg_.head_dim()});
  }
  return c;
}

const float* GPT::decode_step(int32_t token, KVCache& cache) {
  const int64_t C = cfg_.embd, V = cfg_.vocab, hs = cfg_.head_dim();
  const int64_t H = cfg_.heads, Hkv = cfg_.kv_heads, qkv_out = (H + 2 * Hkv) * hs;
  const int64_t pos = cache.len;
  if (pos >= cfg_.context)
    throw Error("gpt: the KV cache is full (" + std::to_string(cfg_.context) + " positions)");
  if (token < 0 || token >= V)
    throw Error("gpt: token id " + std::to_string(token) + " outside the vocabulary");
  step_x_.resize(C), step_ln_.resize(C), step_qkv_.resize(qkv_out), step_y_.resize(C);
  step_fc_.resize(8 * C), step_logits_.resize(V);
  float mean, rstd;
  if (step_q_.numel() != H * hs) step_q_ = Tensor(DType::f32, {1, H, 1, hs});
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
    nn::layernorm_forward(step_ln_.data(), &mean, &rstd, step_x_.data(), w(L.ln1_w), w(L.ln1_b), 1, C);
    nn::linear_forward(step_qkv_.data(), step_ln_.data(), w(L.attn_w), w(L.attn_b), 1, C, qkv_out);
    float* q = step_q_.data<float>();
    std::copy(step_qkv_.begin(), step_qkv_.begin() + H * hs, q);
    float* kc = cache.k[l].data<float>();
    float* vc = cache.v[l].data<float>();
    for (int64_t g = 0; g < Hkv; ++g) {
      std::copy_n(step_qkv_.data() + (H + g) * hs, hs, kc + (g * cfg_.context + pos) * hs);
      std::copy_n(step_qkv_.data() + (H + Hkv + g) * hs, hs, vc + (g * cfg_.context + pos) * hs);
    }
    if (cfg_.rope) {
      rope_row(q, H, hs, pos);
      for (int64_t g = 0; g < Hkv; ++g) rope_row(kc + (g * cfg_.context + pos) * hs, 1, hs, pos);
    }
    attention_into(step_att_, step_q_, cache.k[l], cache.v[l], opts);
    // One token: heads [1, H, 1, hs] are already in [1, C] order.
    nn::linear_forward(step_y_.data(), step_att_.out.data<float>(), w(L.attn_proj_w),
                       w(L.attn_proj_b), 1, C, C);
    nn::residual_forward(step_x_.data(), step_x_.data(), step_y_.data(), C);
    nn::layernorm_forward(step_ln_.data(), &mean, &rstd, step_x_.data(), w(L.ln2_w), w(L.ln2_b), 1, C);
    nn::linear_forward(step_fc_.data(), step_ln_.data(), w(L.fc_w), w(L.fc_b), 1, C, 4 * C);
    nn::gelu_forward(step_fc_.data() + 4 * C, step_fc_.data(), 4 * C);
    nn::linear_forward(step_y_.data(), step_fc_.data() + 4 * C, w(L.fc_proj_w), w(L.fc_proj_b), 1,
                       4 * C, C);
    nn::residual_forward(step_x_.data(), step_x_.data(), step_y_.data(), C);
  }
  cache.len = pos + 1;
  nn::layernorm_forward(step_ln_.data(), &mean, &rstd, step_x_.data(), w(lnf_w_), w(lnf_b_), 1, C);
  nn::linear_forward<float>(step_logits_.data(), step_ln_.data(), w(wte_), nullptr, 1, C, V);
  return step_logits_.data();
}

}  // namespace qkv
