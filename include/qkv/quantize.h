/// @file
/// qkv/quantize.h: a model written as a quantized GGUF file, the format
/// llama.cpp runs, with the types llama-quantize would give each tensor.
///
///   qkv::quantize_model("TinyLlama-1.1B", "tinyllama-q4_k_m.gguf", {.mix = qkv::QuantMix::q4_k_m});
///   qkv::Model m = qkv::Model::load("tinyllama-q4_k_m.gguf");
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"
#include "qkv/weight_type.h"

namespace qkv {

/// The mixes llama-quantize names: one type for most matrices, more bits
/// where they matter. Norms and biases stay float32 in every mix.
enum class QuantMix {
  q8_0,    ///< every matrix Q8_0 (8.5 bits a weight)
  q4_0,    ///< Q4_0, the head Q6_K (4.5 bits)
  q4_k_m,  ///< Q4_K; the head, and V and FFN-down in the first and last eighths and every third layer between, Q6_K (~4.9 bits)
  q5_k_m,  ///< Q5_K with the same Q6_K tensors as q4_k_m (~5.7 bits)
  q6_k     ///< every matrix Q6_K (6.56 bits)
};
/// "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k" (any case); another name is a
/// qkv::Error listing these.
QKV_API QuantMix quant_mix_from_name(const std::string& name);
/// The mix's name, lower case, as above.
QKV_API const char* quant_mix_name(QuantMix mix);
/// llama.cpp's file-type number of the mix (general.file_type).
QKV_API uint32_t quant_mix_file_type(QuantMix mix);

/// The type the mix gives a GGUF tensor (its llama.cpp name, `ne0` values a
/// row, `dims` dims) of a model of `layers` blocks whose head is `tied` to
/// the embedding table, as llama-quantize chooses without an importance
/// matrix: 1-D tensors, norms and position tables stay F32; the head (or a
/// tied embedding table) is Q6_K unless the mix is Q8_0; attn_v/attn_qkv and
/// ffn_down of the _M mixes are Q6_K in layers l < L/8, l >= 7L/8 and
/// (l - L/8) % 3 == 2. A row that is not a whole number of the type's
/// blocks falls back as llama.cpp's does (Q4_K to Q5_0, Q5_K to Q5_1,
/// Q6_K to Q8_0; to F16 when not a multiple of 32).
QKV_API WeightType quant_mix_type(QuantMix mix, const std::string& name, int64_t ne0, int dims, int64_t layers,
                                  bool tied);

/// Options of quantize_model.
struct QuantizeOptions {
  QuantMix mix = QuantMix::q4_k_m;  ///< the types
  /// Called before each tensor is quantized with (its name, its type, tensors
  /// done, tensors in all); may be empty.
  std::function<void(const std::string&, WeightType, int64_t, int64_t)> progress;
};

/// One tensor of the written file.
struct QuantizedTensor {
  std::string name;  ///< llama.cpp's name ("blk.0.attn_q.weight")
  Shape ne;          ///< ggml's order, ne[0] first
  WeightType type;   ///< as quant_mix_type chose
};

/// Reads the model at `input` (a Hugging Face GPT-2 or Llama/Mistral folder,
/// float32 or bf16, or a GGUF file, dequantized exactly first) and writes it
/// to `output` as a GGUF file of the mix's types: llama.cpp's metadata keys
/// and tensor names (Llama's q and k rows in the converter's order), the
/// tokenizer in tokenizer.ggml.* (a GGUF input's metadata is kept as it
/// is). Q8_0 and Q4_0 blocks are those of ggml's reference quantizers, and so
/// are the K-quants' (the blocks llama-quantize writes without an importance
/// matrix). The file is written atomically. A model or tokenizer GGUF cannot
/// describe (qkv's own character-level models, BERT, a SentencePiece
/// tokenizer.json, sliding-window attention) is a qkv::Error naming it.
/// Memory: the model as qkv runs it (a folder's matrices, or a GGUF file's
/// quantized tensors, mapped where the file holds them; an F32 or F16 GGUF
/// file's widened to float32), one tensor's blocks and 256 of its rows in
/// float32: a bf16 Llama-3-8B folder (16 GB) is written from a machine of
/// 24 GB.
QKV_API std::vector<QuantizedTensor> quantize_model(const std::string& input, const std::string& output,
                                                   const QuantizeOptions& options = {});

}  // namespace qkv
