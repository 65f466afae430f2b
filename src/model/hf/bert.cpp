// bert.cpp: BERT-family encoders (model_type "bert": BERT, MiniLM,
// sentence-transformers' models) as one configuration of qkv's model.
//
//   embeddings: word + position + token type 0, LayerNorm      -> wte, wpe, wtt, ln_e
//   each layer (post-norm, bidirectional):
//     attention.self.{query,key,value}  (stacked)              -> attn.c_attn
//     attention.output.dense, attention.output.LayerNorm       -> attn.c_proj, ln_1
//     intermediate.dense (GELU), output.dense, output.LayerNorm -> mlp.c_fc, mlp.c_proj, ln_2
// No final norm, no head: the output is the last layer's hidden states (the
// pooler, unused by sentence embeddings, is not read).
#include "model/hf/hf_folder.h"
#include "qkv/error.h"

namespace qkv::hf {

namespace {

// The sizes config.json gives, against the checkpoint's tensors, before the
// model is allocated from them: a wrong (or absurd) vocab_size,
// max_position_embeddings, type_vocab_size, hidden_size, intermediate_size
// or num_hidden_layers is an error naming the field, not a huge allocation.
void check_sizes(const GPTConfig& c, const std::string& p, const std::string& file,
                 const TensorShapes& tensors) {
  auto expect = [&](const std::string& name, const Shape& want, const char* fields) {
    expect_shape(tensors, file, name, want, fields);
  };
  expect(p + "embeddings.word_embeddings.weight", {c.vocab, c.embd}, "vocab_size and hidden_size");
  expect(p + "embeddings.position_embeddings.weight", {c.context, c.embd},
         "max_position_embeddings and hidden_size");
  if (c.token_types)
    expect(p + "embeddings.token_type_embeddings.weight", {c.token_types, c.embd},
           "type_vocab_size and hidden_size");
  const std::string last = p + "encoder.layer." + std::to_string(c.layers - 1) + ".";
  expect(last + "intermediate.dense.weight", {c.ffn, c.embd}, "num_hidden_layers, intermediate_size and hidden_size");
  // Layers past num_hidden_layers would be dropped without a word.
  const std::string next = p + "encoder.layer." + std::to_string(c.layers) + ".intermediate.dense.weight";
  if (tensors.count(next))
    throw Error("'" + file + "': num_hidden_layers is " + std::to_string(c.layers) +
                ", but the checkpoint has " + next);
}

}  // namespace

Architecture bert_architecture(const nlohmann::json& j, const std::string& file,
                               const TensorShapes& tensors) {
  Architecture a;
  a.model_type = "bert";
  GPTConfig& c = a.config;
  c.vocab = int_field(j, "vocab_size", file, 1);
  c.embd = int_field(j, "hidden_size", file, 1);
  c.layers = int_field(j, "num_hidden_layers", file, 1);
  c.heads = int_field(j, "num_attention_heads", file, 1);
  c.kv_heads = c.heads;
  c.ffn = int_field(j, "intermediate_size", file, 1);
  c.context = int_field(j, "max_position_embeddings", file, 1);
  c.token_types = int_field_or(j, "type_vocab_size", file, 1, 2);  // token type 0 is always added
  c.norm_eps = number_field_or(j, "layer_norm_eps", file, 1e-12);
  if (!(c.norm_eps > 0))  // named here: GPTConfig's check would name its own field
    throw Error("'" + file + "': layer_norm_eps must be > 0, found " + std::to_string(c.norm_eps));
  const std::string act = string_field_or(j, "hidden_act", file, "gelu");
  if (act == "gelu") c.gelu = nn::Gelu::exact;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") c.gelu = nn::Gelu::tanh;
  else throw Error("'" + file + "': hidden_act \"" + act + "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh)");
  const std::string pos = string_field_or(j, "position_embedding_type", file, "absolute");
  if (pos != "absolute")
    throw Error("'" + file + "': position_embedding_type \"" + pos + "\" is not supported (absolute)");
  if (j.contains("is_decoder") && j["is_decoder"] == true)
    throw Error("'" + file + "': is_decoder true is not supported (a BERT encoder)");
  c.bias = true;
  c.post_norm = true;
  c.causal = false;
  c.embed_norm = true;
  c.final_norm = false;
  c.lm_head = false;
  if (c.embd % c.heads != 0)
    throw Error("'" + file + "': num_attention_heads " + std::to_string(c.heads) +
                " does not divide hidden_size " + std::to_string(c.embd));

  // BertModel's names, or a task model's ("bert." before them).
  const std::string p = tensors.count("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  check_sizes(c, p, file, tensors);
  WeightMap& m = a.weights;
  m["transformer.wte.weight"] = {p + "embeddings.word_embeddings.weight"};
  m["transformer.wpe.weight"] = {p + "embeddings.position_embeddings.weight"};
  if (c.token_types) m["transformer.wtt.weight"] = {p + "embeddings.token_type_embeddings.weight"};
  m["transformer.ln_e.weight"] = {p + "embeddings.LayerNorm.weight"};
  m["transformer.ln_e.bias"] = {p + "embeddings.LayerNorm.bias"};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string to = "transformer.h." + std::to_string(l) + ".";
    const std::string from = p + "encoder.layer." + std::to_string(l) + ".";
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      m[to + "attn.c_attn." + k] = {from + "attention.self.query." + k, from + "attention.self.key." + k,
                                    from + "attention.self.value." + k};
      m[to + "attn.c_proj." + k] = {from + "attention.output.dense." + k};
      m[to + "ln_1." + k] = {from + "attention.output.LayerNorm." + k};
      m[to + "mlp.c_fc." + k] = {from + "intermediate.dense." + k};
      m[to + "mlp.c_proj." + k] = {from + "output.dense." + k};
      m[to + "ln_2." + k] = {from + "output.LayerNorm." + k};
    }
  }
  a.pack_matrices = true;
  return a;
}

}  // namespace qkv::hf
