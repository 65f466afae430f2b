// gguf_names.h: how llama.cpp's GGUF files name and lay out the tensors
// of qkv's model (convert_hf_to_gguf.py's names), shared by the reader
// (gguf_model.cpp) and the writer (gguf_export.cpp):
//
//   llama (Llama 2/3, TinyLlama, SmolLM, Mistral),    gpt2
//   qwen2 (the same, q, k and v with biases)
//   token_embd                         -> wte         token_embd, position_embd -> wte, wpe
//   blk.N.attn_norm                    -> ln_1        blk.N.attn_norm (+ bias)   -> ln_1
//   blk.N.attn_{q,k,v} (stacked)       -> c_attn      blk.N.attn_qkv (fused)     -> c_attn
//   blk.N.attn_output                  -> c_proj      blk.N.attn_output          -> c_proj
//   blk.N.ffn_norm                     -> ln_2        blk.N.ffn_norm             -> ln_2
//   blk.N.ffn_{gate,up} (stacked)      -> mlp.c_fc    blk.N.ffn_up               -> mlp.c_fc
//   blk.N.ffn_down                     -> mlp.c_proj  blk.N.ffn_down             -> mlp.c_proj
//   output_norm, output (absent: tied) -> ln_f, head  output_norm, output        -> ln_f, head
//
// A GGUF matrix's ne[0] is its row (a Linear's input), so [in, out] in
// ggml's order is qkv's [out, in]. The converter permutes the rows of
// llama's q and k (not qwen2's) within each head so that RoPE's pairs are adjacent rows
// (2i, 2i + 1), as llama.cpp's rope kernel turns them; qkv turns the
// half-split pairs (i, i + hs/2) of transformers' layout.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qkv/gpt.h"

namespace qkv::gguf {

// One source tensor of a parameter: its rows there, and, for llama's q and
// k, the heads over which the converter's RoPE permutation applies.
struct Source {
  std::string name;
  int64_t rows = 0;
  int64_t unpermute_heads = 0;
};
using SourceMap = std::map<std::string, std::vector<Source>>;  // by qkv's parameter name


// qkv's parameter names -> the file's tensors that make them (in order).
SourceMap source_map(const GPTConfig& c, const std::string& arch);

// The `rows` rows of `row_bytes` bytes at `in` (`heads` heads of hs rows
// each) to `out`, from the converter's order within each head (row 2i + h
// of a head is its pair half h, index i) back to the half-split order (row
// h * hs/2 + i). permute() is its inverse, the converter's own step.
void unpermute(const uint8_t* in, uint8_t* out, int64_t rows, int64_t heads, uint64_t row_bytes);
void permute(const uint8_t* in, uint8_t* out, int64_t rows, int64_t heads, uint64_t row_bytes);

}  // namespace qkv::gguf
