// qkv/gpt.h: a small GPT (nanoGPT's architecture) with forward and backward.
//
//   tokens [B, T] -> wte + wpe -> L x block -> ln_f -> logits = x · wteᵀ (tied)
//   block: x += attn(ln_1(x));  x += mlp(ln_2(x))
//   attn:  c_attn (fused Q, K, V; Hkv <= H heads for GQA) -> causal attention
//          (qkv::attention, top-left) -> c_proj
//   mlp:   c_fc (4C) -> GELU (tanh) -> c_proj
//
// Parameters live in one float32 buffer (so the optimiser and checkpoints
// treat them as one vector) and are named as in nanoGPT's state_dict, so a
// checkpoint loads into PyTorch by name. Activations are allocated once for
// a given (B, T) and reused every step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/attention.h"

namespace qkv {

struct GPTConfig {
  int64_t vocab = 0;
  int64_t context = 64;  // maximum sequence length T (block_size)
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t kv_heads = 4;  // GQA when < heads
  int64_t embd = 128;    // C
  bool rope = false;     // RoPE on q and k instead of the learned wpe table
  bool bias = false;     // biases in Linear and LayerNorm layers (nanoGPT: off)

  int64_t head_dim() const { return embd / heads; }
  // Throws qkv::Error naming the first inconsistent field.
  void validate() const;
};

// One named parameter: a view into the flat buffer.
struct ParamInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in floats
  int64_t size = 0;
  bool decay = false;  // weight decay applies (matrices, not biases or norms)
};

// Keys and values of the tokens decoded so far, per layer: the KV cache of
// generation. K and V are [1, Hkv, context, hs]; positions >= len are unused
// and hidden from attention by key_lengths, so no copy is made per step.
struct KVCache {
  int64_t len = 0;
  std::vector<Tensor> k, v;
};

class GPT {
 public:
  explicit GPT(const GPTConfig& cfg);

  const GPTConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  std::vector<float>& weights() { return w_; }
  const std::vector<float>& weights() const { return w_; }
  std::vector<float>& grads() { return g_; }
  int64_t num_params() const { return static_cast<int64_t>(w_.size()); }

  // nanoGPT's initialisation from a seed: N(0, 0.02) for matrices and
  // embeddings, N(0, 0.02 / sqrt(2 L)) for the residual projections, zero
  // biases, unit LayerNorm weights.
  void init(uint64_t seed);

  // Runs the model on tokens [B, T] (T <= context). With targets [B, T],
  // returns the mean cross-entropy loss and keeps what backward needs;
  // without, returns 0. logits() is [B*T, V] afterwards.
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  // Gradients of the last forward's mean loss into grads() (zeroed first).
  void backward();
  const float* logits() const { return logits_.data(); }

  // One generation step: appends `token` at position cache.len (which must
  // be < context) and returns the logits [V] of the next token. Attends with
  // one query against the cached keys (N = 1, so the causal mask is just
  // "every cached key"), instead of recomputing the whole context.
  const float* decode_step(int32_t token, KVCache& cache);
  KVCache new_cache() const;

  // What the model looks at: the attention weights of every layer and head
  // for one sequence tokens [T] (T <= context), as its forward computes them
  // (causal, after RoPE when on): [layers, heads, T, T], rows summing to 1.
  Tensor attention_maps(const int32_t* tokens, int64_t T);

  // Kernel and threads for attention (forward and backward).
  void set_attention(Kernel kernel, int threads);

 private:
  // Offsets of one block's parameters in the flat buffer.
  struct Layer {
    int64_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
    int64_t ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  };
  // What one block's forward keeps for its backward (and, in a second
  // instance, the gradients of the same quantities).
  struct LayerActs {
    std::vector<float> ln1, ln1_mean, ln1_rstd;  // [BT, C], [BT], [BT]
    std::vector<float> qkv;                      // [BT, (H + 2 Hkv) hs]
    Tensor q, k, v;                              // [B, H|Hkv, T, hs]
    AttentionResult att;                         // out [B, H, T, hs], lse [B, H, T]
    std::vector<float> atty, res2;               // [BT, C]: heads merged; x + attention
    std::vector<float> ln2, ln2_mean, ln2_rstd;
    std::vector<float> fch, fch_gelu;            // [BT, 4C]
    std::vector<float> res3;                     // [BT, C]: the block's output
  };
  struct Acts {
    int64_t B = 0, T = 0;
    std::vector<int32_t> tokens, targets;        // [BT]
    std::vector<float> encoded;                  // [BT, C]
    std::vector<LayerActs> layers;
    std::vector<float> lnf, lnf_mean, lnf_rstd;  // [BT, C], [BT], [BT]
    std::vector<float> probs, losses;            // [BT, V], [BT]
  };

  void build_params();
  void ensure_acts(int64_t B, int64_t T);
  void attention_forward(LayerActs& a);
  void attention_backward(LayerActs& a);
  // Offsets of absent parameters (no bias, no wpe) are -1: null pointers.
  const float* w(int64_t off) const { return off < 0 ? nullptr : w_.data() + off; }
  float* g(int64_t off) { return off < 0 ? nullptr : g_.data() + off; }

  GPTConfig cfg_;
  std::vector<ParamInfo> params_;
  std::vector<float> w_, g_;
  std::vector<Layer> layer_;
  int64_t wte_ = 0, wpe_ = -1, lnf_w_ = 0, lnf_b_ = 0;
  AttentionOptions attn_opts_;
  Acts acts_;
  // Backward scratch: the gradient flowing down the residual stream, and
  // the gradients of one block's intermediates (reused by every block).
  std::vector<float> dres_, dln_, dqkv_, datty_, dfch_, dfch_gelu_, dlogits_;
  Tensor dq_, dk_, dv_, dout_;
  AttentionGrads dattn_;
  std::vector<float> logits_;
  bool has_targets_ = false;
  // decode_step's one-token scratch.
  std::vector<float> step_x_, step_ln_, step_qkv_, step_y_, step_fc_, step_logits_;
  Tensor step_q_;
  AttentionResult step_att_;
};

}  // namespace qkv
