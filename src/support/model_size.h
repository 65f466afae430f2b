// support/model_size.h: what a transformer costs before it is built: parameters,
// FLOPs per token and the KV cache, for qkv's own GPT and for the published
// models the lessons compare (BERT-base, GPT-2 small, Llama 3 8B and 70B).
//
// Counting rules (stated, so the numbers can be checked by hand):
// - parameters: every weight and bias, embeddings included; a tied output
//   head (GPT-2, qkv) is not counted twice.
// - FLOPs per token: one forward pass of one token that attends to
//   `context` keys (the model's full context unless asked otherwise), a multiply-add counted as 2 FLOPs: 2 x every weight
//   that multiplies that token's activations (the projections, the MLP and
//   the output head; embedding lookups, norms and biases are not products),
//   plus attention: q·k against `context` keys and the weighted sum of
//   `context` values, 2 x 2 x context x heads x head_dim per layer.
// - KV cache: keys and values of every layer and key/value head:
//   2 x layers x kv_heads x head_dim elements per token. Grouped-query
//   attention (kv_heads < heads) shrinks it by heads / kv_heads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qkv/gpt.h"

namespace qkv {

// The block layouts the calculator knows.
enum class Arch {
  gpt,    // GPT-2 / nanoGPT / qkv: learned positions (or RoPE), LayerNorm,
          // GELU MLP of ffn width, output head tied to the token embedding
  bert,   // BERT: GPT's block plus token-type embeddings, an embedding
          // LayerNorm and a pooler; no output head
  llama,  // Llama: RoPE, RMSNorm, SwiGLU MLP (three ffn matrices), untied
          // output head, no biases
};

const char* arch_name(Arch a);                          // "gpt", "bert", "llama"
std::optional<Arch> parse_arch(const std::string& s);

struct ModelShape {
  std::string name;  // a preset's name, or "custom"
  Arch arch = Arch::gpt;
  int64_t layers = 0, embd = 0, heads = 0, kv_heads = 0, vocab = 0, context = 0;
  int64_t ffn = 0;                // MLP width; 0 = 4 x embd
  bool bias = true;               // Linear and LayerNorm biases (gpt and bert)
  bool learned_positions = true;  // a [context, embd] position table (gpt and bert)
  bool tied_head = false;         // llama: the head is the token table (SmolLM); gpt's always is
  bool attn_bias = false;         // llama: biases in q, k, v and o (attention_bias; qkv_bias below: q, k, v only)
  bool mlp_bias = false;          // llama: biases in gate, up and down (mlp_bias)
  bool qkv_bias = false;          // llama: biases in q, k and v only (Qwen2)
  int64_t head_size = 0;          // a head's width where a model sets it; 0 = embd / heads

  int64_t head_dim() const { return head_size ? head_size : embd / heads; }
  int64_t ffn_width() const { return ffn ? ffn : 4 * embd; }
  // Throws qkv::Error naming the first field out of range (sizes >= 1, heads
  // divides embd unless head_size is set, kv_heads divides heads, totals
  // within 64 bits).
  void validate() const;
};

// The shape of a GPTConfig (qkv/gpt.h): qkv's own GPT, so `qkv train` can
// print its cost, or a loaded folder's (an RMSNorm SwiGLU model is llama).
ModelShape shape_of(const GPTConfig& cfg);

// bert-base, gpt2, llama3-8b, llama3-70b: the lesson's table (d_model,
// heads, layers) with the vocabularies, contexts, MLP widths and key/value
// head counts their model cards publish.
const std::vector<ModelShape>& model_presets();
std::optional<ModelShape> find_preset(const std::string& name);

struct ModelSize {
  int64_t params = 0;
  int64_t embedding_params = 0;  // token (and position, type) tables
  double flops_per_token = 0;    // forward, attending to `context` keys
  int64_t kv_elements_per_token = 0;      // this model's cache
  int64_t kv_elements_per_token_mha = 0;  // the same model with kv_heads = heads
};

// Validates and counts (rules above). FLOPs are for a token attending to
// `context` keys (0 = the model's m.context); parameters never depend on it.
ModelSize model_size(const ModelShape& m, int64_t context = 0);

}  // namespace qkv
