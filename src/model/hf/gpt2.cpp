// gpt2.cpp: GPT-2 (model_type "gpt2") as one configuration of qkv's model:
// nanoGPT's block, which was written after it, with biases and GPT-2's
// tanh GELU.
//
//   embeddings: wte (tied to the head) + learned positions wpe     -> wte, wpe
//   each layer (pre-norm, causal):
//     ln_1, attn.c_attn (q, k, v fused), attn.c_proj               -> the same names
//     ln_2, mlp.c_fc (GELU), mlp.c_proj                            -> the same names
//   ln_f, then logits through wte
// GPT-2's Linear layers are Conv1D modules, whose weights are stored
// [in, out]: they are transposed as they are read. The checkpoint's names
// start with "transformer." (GPT2LMHeadModel) or not (GPT2Model, and the
// Hub's own gpt2 files); its causal-mask buffers (attn.bias, attn.masked_bias)
// and lm_head.weight (the head is wte, as transformers ties it) are not read.
#include "model/hf/hf_folder.h"
#include "qkv/error.h"

namespace qkv::hf {

namespace {

// The sizes config.json gives, against the checkpoint's tensors, before the
// model is allocated from them (as bert.cpp checks its own).
void check_sizes(const GPTConfig& c, const std::string& p, const std::string& file,
                 const TensorShapes& tensors) {
  auto expect = [&](const std::string& name, const Shape& want, const char* fields) {
    expect_shape(tensors, file, name, want, fields);
  };
  expect(p + "wte.weight", {c.vocab, c.embd}, "vocab_size and n_embd");
  expect(p + "wpe.weight", {c.context, c.embd}, "n_positions and n_embd");
  const std::string last = p + "h." + std::to_string(c.layers - 1) + ".";
  expect(last + "mlp.c_fc.weight", {c.embd, c.ffn_dim()}, "n_layer, n_embd and n_inner");
  const std::string next = p + "h." + std::to_string(c.layers) + ".mlp.c_fc.weight";
  if (tensors.count(next))
    throw Error("'" + file + "': n_layer is " + std::to_string(c.layers) + ", but the checkpoint has " + next);
}

}  // namespace

Architecture gpt2_architecture(const nlohmann::json& j, const std::string& file,
                               const TensorShapes& tensors) {
  Architecture a;
  a.model_type = "gpt2";
  GPTConfig& c = a.config;
  c.vocab = int_field(j, "vocab_size", file, 1);
  c.embd = int_field(j, "n_embd", file, 1);
  c.layers = int_field(j, "n_layer", file, 1);
  c.heads = int_field(j, "n_head", file, 1);
  c.kv_heads = c.heads;
  c.ffn = int_field_or(j, "n_inner", file, 1, 0);
  c.context = int_field(j, "n_positions", file, 1);
  c.norm_eps = number_field_or(j, "layer_norm_epsilon", file, 1e-5);
  if (!(c.norm_eps > 0))
    throw Error("'" + file + "': layer_norm_epsilon must be > 0, found " + std::to_string(c.norm_eps));
  const std::string act = string_field_or(j, "activation_function", file, "gelu_new");
  if (act == "gelu") c.gelu = nn::Gelu::exact;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.gelu = nn::Gelu::tanh;
  else throw Error("'" + file + "': activation_function \"" + act + "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh)");
  require_flag(j, "scale_attn_weights", true, file);
  require_flag(j, "scale_attn_by_inverse_layer_idx", false, file);
  require_flag(j, "add_cross_attention", false, file);
  require_flag(j, "tie_word_embeddings", true, file);  // qkv's head is wte
  c.bias = true;
  if (c.embd % c.heads != 0)
    throw Error("'" + file + "': n_head " + std::to_string(c.heads) + " does not divide n_embd " +
                std::to_string(c.embd));

  const std::string p = tensors.count("transformer.wte.weight") ? "transformer." : "";
  check_sizes(c, p, file, tensors);
  WeightMap& m = a.weights;
  m["transformer.wte.weight"] = {p + "wte.weight"};
  m["transformer.wpe.weight"] = {p + "wpe.weight"};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string to = "transformer.h." + std::to_string(l) + ".";
    const std::string from = p + "h." + std::to_string(l) + ".";
    for (const char* name : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"})
      for (const char* kind : {".weight", ".bias"})
        m[to + name + kind] = {from + name + kind};
    for (const char* conv1d : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
      a.transposed.insert(to + conv1d + ".weight");
  }
  m["transformer.ln_f.weight"] = {p + "ln_f.weight"};
  m["transformer.ln_f.bias"] = {p + "ln_f.bias"};
  return a;
}

}  // namespace qkv::hf
