// llama.cpp: the Llama family (model_type "llama": Llama 2 and 3.x,
// TinyLlama, SmolLM, ...; "mistral": the same block with a sliding window;
// "qwen2": with biases on q, k and v) as one configuration of qkv's model.
//
//   embed_tokens                                                  -> wte
//   each layer (pre-norm RMSNorm, causal, RoPE on q and k, GQA):
//     input_layernorm, self_attn.{q,k,v}_proj (stacked), o_proj   -> ln_1, attn.c_attn, attn.c_proj
//     post_attention_layernorm, mlp.{gate,up}_proj (stacked)      -> ln_2, mlp.c_fc (SwiGLU)
//     mlp.down_proj                                               -> mlp.c_proj
//   norm, then lm_head (or embed_tokens when tie_word_embeddings)  -> ln_f, lm_head
// The projections' biases (attention_bias, mlp_bias; Qwen2's on q, k and v)
// stack as their weights do. A head may be wider or narrower than
// hidden_size / num_attention_heads (head_dim).
// transformers stores q and k already in the half-split RoPE layout qkv
// uses, so they are read as they are. Names start with "model." (a causal
// LM) or not (LlamaModel).
#include <cmath>

#include "model/hf/hf_folder.h"
#include "qkv/error.h"

namespace qkv::hf {

namespace {

using json = nlohmann::json;
using Kind = GPTConfig::RopeScaling::Kind;

// rope_scaling (Hub folders: beside rope_theta) or transformers 5's
// rope_parameters (which holds rope_theta too) into the config; "default"
// and null mean none. Both at once would leave one of them unread: refused.
void read_rope(const json& j, const std::string& file, GPTConfig& c) {
  c.rope_theta = number_field_or(j, "rope_theta", file, 10000.0);
  const char* given = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (given)
      throw Error("'" + file + "': both " + given + " and " + key + " are given; a folder gives one");
    given = key;
    const json& r = j[key];
    if (!r.is_object()) throw Error("'" + file + "': " + key + " must be an object, found " + r.dump());
    c.rope_theta = number_field_or(r, "rope_theta", file, c.rope_theta);
    const std::string type = string_field_or(r, "rope_type", file, string_field_or(r, "type", file, "default"));
    if (type == "default") continue;
    if (type != "linear" && type != "llama3")
      throw Error("'" + file + "': " + key + ".rope_type \"" + type + "\" is not supported (default, linear, llama3)");
    GPTConfig::RopeScaling& s = c.rope_scaling;
    s.kind = type == "linear" ? Kind::linear : Kind::llama3;
    s.factor = number_field_or(r, "factor", file, 0.0);
    if (!(s.factor > 0))
      throw Error("'" + file + "': " + key + ".factor must be a number > 0, found " + r.value("factor", json()).dump());
    if (s.kind == Kind::llama3) {
      s.low_freq_factor = number_field_or(r, "low_freq_factor", file, 1.0);
      s.high_freq_factor = number_field_or(r, "high_freq_factor", file, 4.0);
      s.original_context = int_field(r, "original_max_position_embeddings", file, 1);
    }
  }
}

// The sizes config.json gives, against the checkpoint's tensors, before the
// model is allocated from them (as bert.cpp checks its own).
void check_sizes(const GPTConfig& c, const std::string& p, const std::string& file, const TensorShapes& tensors) {
  auto expect = [&](const std::string& name, const Shape& want, const char* fields) {
    expect_shape(tensors, file, name, want, fields);
  };
  const int64_t hs = c.head_dim();
  expect(p + "embed_tokens.weight", {c.vocab, c.embd}, "vocab_size and hidden_size");
  const std::string last = p + "layers." + std::to_string(c.layers - 1) + ".";
  expect(last + "mlp.gate_proj.weight", {c.ffn, c.embd}, "num_hidden_layers, intermediate_size and hidden_size");
  expect(last + "self_attn.q_proj.weight", {c.heads * hs, c.embd}, "num_attention_heads, head_dim and hidden_size");
  expect(last + "self_attn.k_proj.weight", {c.kv_heads * hs, c.embd}, "num_key_value_heads and hidden_size");
  expect(last + "self_attn.o_proj.weight", {c.embd, c.heads * hs}, "hidden_size, num_attention_heads and head_dim");
  const std::string next = p + "layers." + std::to_string(c.layers) + ".mlp.gate_proj.weight";
  if (tensors.count(next))
    throw Error("'" + file + "': num_hidden_layers is " + std::to_string(c.layers) + ", but the checkpoint has " + next);
}

}  // namespace

Architecture llama_architecture(const json& j, const std::string& file, const TensorShapes& tensors) {
  Architecture a;
  a.model_type = string_field_or(j, "model_type", file, "llama");
  GPTConfig& c = a.config;
  c.vocab = int_field(j, "vocab_size", file, 1);
  c.embd = int_field(j, "hidden_size", file, 1);
  c.layers = int_field(j, "num_hidden_layers", file, 1);
  c.heads = int_field(j, "num_attention_heads", file, 1);
  c.kv_heads = int_field_or(j, "num_key_value_heads", file, 1, c.heads);
  c.ffn = int_field(j, "intermediate_size", file, 1);
  c.context = int_field(j, "max_position_embeddings", file, 1);
  c.norm_eps = number_field_or(j, "rms_norm_eps", file, 1e-6);
  if (!(c.norm_eps > 0)) throw Error("'" + file + "': rms_norm_eps must be > 0, found " + std::to_string(c.norm_eps));
  if (c.heads % c.kv_heads != 0)
    throw Error("'" + file + "': num_key_value_heads " + std::to_string(c.kv_heads) +
                " does not divide num_attention_heads " + std::to_string(c.heads));
  // head_dim, where given (and not null), sets the heads' width; else
  // num_attention_heads splits hidden_size.
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int64_t head_dim = int_field(j, "head_dim", file, 2);
    if (head_dim % 2 != 0) throw Error("'" + file + "': head_dim must be even (RoPE turns pairs), found " + std::to_string(head_dim));
    if (head_dim * c.heads != c.embd) c.head_size = head_dim;
  } else if (c.embd % c.heads != 0) {
    throw Error("'" + file + "': num_attention_heads " + std::to_string(c.heads) + " does not divide hidden_size " +
                std::to_string(c.embd));
  }
  const std::string act = string_field_or(j, "hidden_act", file, "silu");
  if (act != "silu") throw Error("'" + file + "': hidden_act \"" + act + "\" is not supported (silu)");
  if (a.model_type == "llama") {  // Mistral's and Qwen2's biases are fixed, whatever config.json says
    c.attn_bias = bool_field_or(j, "attention_bias", file, false);
    c.mlp_bias = bool_field_or(j, "mlp_bias", file, false);
  } else if (a.model_type == "mistral") {
    c.window = int_field_or(j, "sliding_window", file, 1, 0);  // null: every earlier key, as Llama
    if (j.contains("layer_types") && !j["layer_types"].is_null())
      throw Error("'" + file + "': layer_types (a window on some layers only) is not supported");
  } else {  // qwen2: its sliding window (on some layers) only where use_sliding_window says
    c.qkv_bias = true;
    if (bool_field_or(j, "use_sliding_window", file, false))
      throw Error("'" + file + "': use_sliding_window (a window on the upper layers) is not supported");
    if (j.contains("layer_types") && !j["layer_types"].is_null())
      for (const json& t : j["layer_types"])
        if (t != "full_attention")
          throw Error("'" + file + "': layer_types: " + t.dump() + " is not supported (full_attention)");
  }
  read_rope(j, file, c);
  c.rope = true;
  c.bias = false;
  c.rms_norm = true;
  c.swiglu = true;
  c.tied_head = j.contains("tie_word_embeddings") && j["tie_word_embeddings"] == true;

  const std::string p = tensors.count("model.embed_tokens.weight") ? "model." : "";
  check_sizes(c, p, file, tensors);
  const int64_t hs = c.head_dim();
  WeightMap& m = a.weights;
  m["transformer.wte.weight"] = {p + "embed_tokens.weight"};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string to = "transformer.h." + std::to_string(l) + ".";
    const std::string from = p + "layers." + std::to_string(l) + ".";
    m[to + "ln_1.weight"] = {from + "input_layernorm.weight"};
    m[to + "attn.c_attn.weight"] = {from + "self_attn.q_proj.weight", from + "self_attn.k_proj.weight",
                                    from + "self_attn.v_proj.weight"};
    a.source_rows[to + "attn.c_attn.weight"] = {c.heads * hs, c.kv_heads * hs, c.kv_heads * hs};
    m[to + "attn.c_proj.weight"] = {from + "self_attn.o_proj.weight"};
    if (c.qkv_biased()) {
      m[to + "attn.c_attn.bias"] = {from + "self_attn.q_proj.bias", from + "self_attn.k_proj.bias",
                                    from + "self_attn.v_proj.bias"};
      a.source_rows[to + "attn.c_attn.bias"] = a.source_rows[to + "attn.c_attn.weight"];
    }
    if (c.proj_biased()) m[to + "attn.c_proj.bias"] = {from + "self_attn.o_proj.bias"};
    m[to + "ln_2.weight"] = {from + "post_attention_layernorm.weight"};
    m[to + "mlp.c_fc.weight"] = {from + "mlp.gate_proj.weight", from + "mlp.up_proj.weight"};
    m[to + "mlp.c_proj.weight"] = {from + "mlp.down_proj.weight"};
    if (c.mlp_bias) {
      m[to + "mlp.c_fc.bias"] = {from + "mlp.gate_proj.bias", from + "mlp.up_proj.bias"};
      m[to + "mlp.c_proj.bias"] = {from + "mlp.down_proj.bias"};
    }
  }
  m["transformer.ln_f.weight"] = {p + "norm.weight"};
  if (!c.tied_head) {
    if (!tensors.count("lm_head.weight"))
      throw Error("'" + file + "': tie_word_embeddings is false, but the checkpoint has no lm_head.weight");
    m["lm_head.weight"] = {"lm_head.weight"};
  }
  return a;
}

}  // namespace qkv::hf
