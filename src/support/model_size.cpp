// model_size.cpp: parameter, FLOP and KV-cache counts (rules in the header).
#include "support/model_size.h"

#include <algorithm>
#include <utility>

namespace qkv {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::gpt: return "gpt";
    case Arch::bert: return "bert";
    case Arch::llama: return "llama";
  }
  return "?";
}

std::optional<Arch> parse_arch(const std::string& s) {
  for (Arch a : {Arch::gpt, Arch::bert, Arch::llama})
    if (s == arch_name(a)) return a;
  return std::nullopt;
}

void ModelShape::validate() const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw Error("model shape" + (name.empty() ? "" : " " + name) + ": " + what);
  };
  // 2^31 per size keeps every product below (layers x embd x ffn x 3) well
  // inside 64 bits as long as the total does: checked below in double.
  const int64_t kMax = int64_t{1} << 31;
  for (auto [field, value] : {std::pair{"layers", layers}, {"embd", embd}, {"heads", heads},
                              {"kv_heads", kv_heads}, {"vocab", vocab}, {"context", context}})
    need(value >= 1 && value <= kMax, std::string(field) + " must be in [1, 2^31], found " +
                                          std::to_string(value));
  need(ffn >= 0 && ffn <= kMax, "ffn must be in [0, 2^31] (0 = 4 x embd), found " + std::to_string(ffn));
  need(head_size >= 0 && head_size <= kMax, "head_size must be in [0, 2^31] (0 = embd / heads), found " +
                                               std::to_string(head_size));
  need(head_size > 0 || embd % heads == 0,
       "heads must divide embd " + std::to_string(embd) + ", found " + std::to_string(heads));
  need(heads % kv_heads == 0,
       "kv_heads must divide heads " + std::to_string(heads) + ", found " + std::to_string(kv_heads));
  const double C = static_cast<double>(embd), F = static_cast<double>(ffn_width());
  const double A = static_cast<double>(heads) * static_cast<double>(head_dim());
  const double approx = static_cast<double>(layers) * (4 * C * std::max(C, A) + 3 * C * F) +
                        static_cast<double>(vocab + context) * C * 2;
  need(approx < 1e18, "the model would have more than 10^18 parameters");
}

ModelShape shape_of(const GPTConfig& cfg) {
  ModelShape m;
  m.name = "qkv";
  // A post-norm encoder with token types is BERT's layout (model_size
  // counts its token-type table and embedding norm); the rest are GPT's.
  m.arch = cfg.post_norm && !cfg.causal ? Arch::bert : cfg.rms_norm && cfg.swiglu ? Arch::llama : Arch::gpt;
  m.ffn = cfg.ffn;
  m.layers = cfg.layers;
  m.embd = cfg.embd;
  m.heads = cfg.heads;
  m.kv_heads = cfg.kv_heads;
  m.vocab = cfg.vocab;
  m.context = cfg.context;
  m.bias = cfg.bias;
  m.learned_positions = !cfg.rope;
  m.tied_head = cfg.tied_head;
  m.attn_bias = cfg.proj_biased();
  m.qkv_bias = cfg.qkv_biased() && !cfg.proj_biased();
  m.head_size = cfg.head_size;
  m.mlp_bias = cfg.mlp_biased();
  return m;
}

const std::vector<ModelShape>& model_presets() {
  //                 name          arch         L   C     H   Hkv  vocab   ctx   ffn    bias  pos
  static const std::vector<ModelShape> presets = {
      {"bert-base", Arch::bert, 12, 768, 12, 12, 30522, 512, 3072, true, true},
      {"gpt2", Arch::gpt, 12, 768, 12, 12, 50257, 1024, 3072, true, true},
      {"llama3-8b", Arch::llama, 32, 4096, 32, 8, 128256, 8192, 14336, false, false},
      {"llama3-70b", Arch::llama, 80, 8192, 64, 8, 128256, 8192, 28672, false, false},
  };
  return presets;
}

std::optional<ModelShape> find_preset(const std::string& name) {
  for (const ModelShape& m : model_presets())
    if (m.name == name) return m;
  return std::nullopt;
}

ModelSize model_size(const ModelShape& m, int64_t context) {
  m.validate();
  if (context < 0) throw Error("model_size: context must be >= 0 (0 = the model's), found " + std::to_string(context));
  if (context == 0) context = m.context;
  const int64_t L = m.layers, C = m.embd, hd = m.head_dim(), F = m.ffn_width();
  const int64_t q_out = m.heads * hd, kv_out = m.kv_heads * hd;
  const bool llama = m.arch == Arch::llama;
  const int64_t b = (m.bias && !llama) ? 1 : 0;  // 1 where biases exist

  // Weights that multiply a token's activations in one block.
  const int64_t attn_w = C * (q_out + 2 * kv_out) + q_out * C;
  const int64_t mlp_w = (llama ? 3 : 2) * C * F;
  // Everything else in a block: biases and norms.
  const int64_t ab = llama ? int64_t{m.attn_bias} : b, mb = llama ? int64_t{m.mlp_bias} : b;
  const int64_t qb = llama ? int64_t{m.attn_bias || m.qkv_bias} : b;
  const int64_t attn_b = qb * (q_out + 2 * kv_out) + ab * C;
  const int64_t mlp_b = mb * ((llama ? 2 : 1) * F + C);
  const int64_t norms = llama ? 2 * C : 2 * (C + b * C);

  ModelSize s;
  s.embedding_params = m.vocab * C;
  if (!llama && m.learned_positions) s.embedding_params += m.context * C;
  if (m.arch == Arch::bert) s.embedding_params += 2 * C;  // token types A and B
  int64_t other = 0;
  if (m.arch == Arch::bert) other += 2 * C + C * C + C;  // embedding LayerNorm, pooler
  if (m.arch != Arch::bert) other += llama ? C : C + b * C;  // the final norm
  const int64_t head = llama && !m.tied_head ? m.vocab * C : 0;  // untied output head
  s.params = s.embedding_params + L * (attn_w + mlp_w + attn_b + mlp_b + norms) + other + head;

  const int64_t head_matmul = m.arch == Arch::bert ? 0 : m.vocab * C;  // tied or not
  s.flops_per_token = 2.0 * static_cast<double>(L * (attn_w + mlp_w) + head_matmul) +
                      4.0 * static_cast<double>(L) * static_cast<double>(context) *
                          static_cast<double>(q_out);
  s.kv_elements_per_token = 2 * L * kv_out;
  s.kv_elements_per_token_mha = 2 * L * q_out;
  return s;
}

}  // namespace qkv
