// gguf_names.cpp: the tensor names and q/k row order of llama.cpp's GGUF
// files (gguf_names.h).
#include "model/gguf_names.h"

#include <cstring>

namespace qkv::gguf {

SourceMap source_map(const GPTConfig& c, const std::string& arch) {
  SourceMap s;
  const int64_t hs = c.head_dim(), q = c.heads * hs, kv = c.kv_heads * hs;
  s["transformer.wte.weight"] = {{"token_embd.weight", c.vocab}};
  if (arch == "gpt2") s["transformer.wpe.weight"] = {{"position_embd.weight", c.context}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string to = "transformer.h." + std::to_string(l) + ".", from = "blk." + std::to_string(l) + ".";
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      if (arch == "gpt2") {
        s[to + "ln_1." + k] = {{from + "attn_norm." + k, c.embd}};
        s[to + "attn.c_attn." + k] = {{from + "attn_qkv." + k, 3 * c.embd}};
        s[to + "attn.c_proj." + k] = {{from + "attn_output." + k, c.embd}};
        s[to + "ln_2." + k] = {{from + "ffn_norm." + k, c.embd}};
        s[to + "mlp.c_fc." + k] = {{from + "ffn_up." + k, c.ffn_dim()}};
        s[to + "mlp.c_proj." + k] = {{from + "ffn_down." + k, c.embd}};
        continue;
      }
      // The converter turns llama's q and k rows to RoPE's adjacent pairs;
      // qwen2's stay in transformers' half-split order (llama.cpp's NEOX RoPE).
      const bool permuted = arch == "llama";
      if (k == "weight" || c.qkv_biased())
        s[to + "attn.c_attn." + k] = {{from + "attn_q." + k, q, permuted ? c.heads : 0},
                                      {from + "attn_k." + k, kv, permuted ? c.kv_heads : 0},
                                      {from + "attn_v." + k, kv}};
      if (k == "weight" || c.proj_biased()) s[to + "attn.c_proj." + k] = {{from + "attn_output." + k, c.embd}};
      if (k == "weight" || c.mlp_bias) {
        s[to + "mlp.c_fc." + k] = {{from + "ffn_gate." + k, c.ffn_dim()}, {from + "ffn_up." + k, c.ffn_dim()}};
        s[to + "mlp.c_proj." + k] = {{from + "ffn_down." + k, c.embd}};
      }
    }
    if (arch != "gpt2") {
      s[to + "ln_1.weight"] = {{from + "attn_norm.weight", c.embd}};
      s[to + "ln_2.weight"] = {{from + "ffn_norm.weight", c.embd}};
    }
  }
  s["transformer.ln_f.weight"] = {{"output_norm.weight", c.embd}};
  if (arch == "gpt2") s["transformer.ln_f.bias"] = {{"output_norm.bias", c.embd}};
  if (!c.tied_head) s["lm_head.weight"] = {{"output.weight", c.vocab}};
  return s;
}

namespace {

// Row (2i + part) of each head of the converter's order <-> row
// (part * hs/2 + i) of transformers' order; `to_converter` picks the way.
void reorder(const uint8_t* in, uint8_t* out, int64_t rows, int64_t heads, uint64_t row_bytes, bool to_converter) {
  const int64_t hs = rows / heads, half = hs / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t part = 0; part < 2; ++part)
      for (int64_t i = 0; i < half; ++i) {
        const auto split = static_cast<uint64_t>(h * hs + part * half + i), paired = static_cast<uint64_t>(h * hs + 2 * i + part);
        std::memcpy(out + (to_converter ? paired : split) * row_bytes, in + (to_converter ? split : paired) * row_bytes,
                    row_bytes);
      }
}

}  // namespace

void unpermute(const uint8_t* in, uint8_t* out, int64_t rows, int64_t heads, uint64_t row_bytes) {
  reorder(in, out, rows, heads, row_bytes, false);
}

void permute(const uint8_t* in, uint8_t* out, int64_t rows, int64_t heads, uint64_t row_bytes) {
  reorder(in, out, rows, heads, row_bytes, true);
}

}  // namespace qkv::gguf
