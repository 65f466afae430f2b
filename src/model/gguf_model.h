// gguf_model.h: a GGUF file (llama.cpp's format, qkv/gguf.h) read into
// qkv's model: the metadata into a GPTConfig, the matrices kept in their
// types (qkv/weight.h) or dequantized with the reference dequantizers
// (qkv/weight_type.h) into the model's float32 weights, and the byte-level
// BPE tokenizer its metadata describes.
#pragma once

#include <memory>
#include <string>

#include "qkv/bpe.h"
#include "qkv/gpt.h"

namespace qkv::gguf {

// Whether `path` is a file to read as GGUF: a regular file whose name ends
// in ".gguf" or whose first four bytes are "GGUF".
bool is_gguf_file(const std::string& path);

// What load_model makes of a file.
struct GgufModel {
  std::string architecture;  // general.architecture: "llama", "qwen2" or "gpt2"
  std::unique_ptr<GPT> gpt;
  std::shared_ptr<const BpeTokenizer> tokenizer;
};

// The model in the file at `path`: architectures llama (Llama 2 and 3,
// TinyLlama, SmolLM, Mistral) and gpt2, names and shapes as llama.cpp's
// converter writes them. Whatever it cannot run exactly (a metadata key or
// tensor that changes the maths, a tensor type without a dequantizer, a
// missing or misshapen tensor, a non-finite weight) is a qkv::Error naming
// the file and it. `dequantize`: every weight to float32 (the reference the
// quantized products are checked against), else the matrices as stored.
GgufModel load_model(const std::string& path, bool dequantize = false);

}  // namespace qkv::gguf
