// hf_folder.h: a Hugging Face model folder (config.json + model.safetensors,
// or shards listed by model.safetensors.index.json) read into qkv's model.
//
// An architecture is two things (one file each: bert.cpp, gpt2.cpp, llama.cpp): its
// config.json read into a GPTConfig (the block description), and its
// weight-name map, which says which of the checkpoint's tensors make each
// of the model's parameters. Everything else (finding the shards, checking
// names and shapes, converting F16/BF16, refusing non-finite values) is
// shared here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/gpt.h"

namespace qkv::hf {

// One parameter's sources: tensors whose rows, stacked in this order (along
// dim 0), make the parameter (q, k and v into the fused c_attn), or one.
using WeightMap = std::map<std::string, std::vector<std::string>>;

// The checkpoint's tensors (all shards): name -> shape.
using TensorShapes = std::map<std::string, Shape>;

// A folder's weights: model.safetensors, or the shards its
// model.safetensors.index.json lists, and the one file each tensor is read
// from. An index entry that names a shard without its tensor is read past
// as transformers reads it (from whichever shard has it, one warning each);
// a tensor no shard has is an error naming the entry.
struct Checkpoint {
  std::vector<std::string> files;              // paths: the shards in the order of the first tensor name (sorted) that each holds
  std::map<std::string, std::string> file_of;  // tensor name -> its file's path
  TensorShapes shapes;
  std::map<std::string, std::string> dtypes;   // the file's dtype names ("BF16")
  std::vector<std::string> warnings;           // one line each, for the user
};

// dir's checkpoint, its headers read (not its data).
Checkpoint read_checkpoint(const std::string& dir);

// What an architecture makes of a folder.
struct Architecture {
  std::string model_type;   // config.json's, e.g. "bert"
  GPTConfig config;
  WeightMap weights;        // by qkv's parameter names (ParamInfo::name)
  // Parameters the checkpoint stores [in, out] (GPT-2's Conv1D), where
  // Stored [in, out] where qkv's Linear weights are [out, in]: transposed
  // as they are read into the model, read as they lie where mapped.
  std::set<std::string> transposed;
  // Stacked parameters whose sources have different row counts (GQA's q, k
  // and v): the rows of each source, in order; others split evenly.
  std::map<std::string, std::vector<int64_t>> source_rows;
  // A float32 checkpoint's matrices packed at load (GptLoader::pack_matrices)
  // where the SIMD path has the packed kernel, instead of read where the
  // mapped file holds them: an encoder, whose Linear layers see one text's
  // tokens or a batch's.
  bool pack_matrices = false;
  Checkpoint checkpoint;  // the files it was read from (read_architecture)
};

// True when dir/config.json exists and names a "model_type" (a Hugging
// Face folder, as opposed to qkv's own, whose config.json has "arch").
bool is_hf_folder(const std::string& dir);

// dir/config.json read by the architecture its model_type names; anything
// it cannot run is a qkv::Error naming the field. The architecture sees the
// checkpoint's tensor names and shapes (it may look for a prefix, and checks
// the sizes config.json gives before the model is allocated from them).
Architecture read_architecture(const std::string& dir);

// The model of `arch` with its weights read from dir's safetensors (one
// file or shards, each tensor from its file in arch.checkpoint), each
// parameter checked: every source present, shapes stacking to the
// parameter's, a float dtype, finite values.
std::unique_ptr<GPT> load_weights(const std::string& dir, const Architecture& arch);

// The architectures (bert.cpp, gpt2.cpp, llama.cpp): config.json's object -> config and map,
// `file` naming config.json in messages, `tensors` the checkpoint's.
// llama_architecture reads "llama", "mistral" (Llama's block with a sliding
// window) and "qwen2" (with biases on q, k and v).
Architecture bert_architecture(const nlohmann::json& config, const std::string& file,
                               const TensorShapes& tensors);

Architecture llama_architecture(const nlohmann::json& config, const std::string& file,
                                const TensorShapes& tensors);
Architecture gpt2_architecture(const nlohmann::json& config, const std::string& file,
                               const TensorShapes& tensors);

// A JSON file of the folder, parsed strictly (a repeated key is an error)
// to at most max_depth levels; errors name the path.
nlohmann::json read_json(const std::string& path, int max_depth);

// The checkpoint's tensor `name` must be `want`, the shape config.json's
// `fields` make: a qkv::Error naming both (and the file) when it is absent
// or another shape. Checked before the model is allocated from the fields.
void expect_shape(const TensorShapes& tensors, const std::string& file, const std::string& name,
                  const Shape& want, const char* fields);

// A boolean of config.json that changes the maths, of which qkv implements
// only `supported`: absent or null passes, the other value is an error.
void require_flag(const nlohmann::json& j, const char* key, bool supported, const std::string& file);

// Shared helpers of the architectures: a required integer >= lo, an optional
// one, a number, a string; each error names the field and the file.
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& file, int64_t lo);
int64_t int_field_or(const nlohmann::json& j, const char* key, const std::string& file, int64_t lo,
                     int64_t fallback);
double number_field_or(const nlohmann::json& j, const char* key, const std::string& file,
                       double fallback);
bool bool_field_or(const nlohmann::json& j, const char* key, const std::string& file, bool fallback);
std::string string_field_or(const nlohmann::json& j, const char* key, const std::string& file,
                            const std::string& fallback);

}  // namespace qkv::hf
