// checkpoint.h: a trained model on disk, loadable by qkv and by PyTorch.
//
//   DIR/model.safetensors   the weights by nanoGPT's names (float32); the
//                           config is repeated in its metadata
//   DIR/config.json         the model's shape (GPTConfig)
//   DIR/vocab.json          the tokenizer
//   DIR/train_state.safetensors  AdamW's moments + the iteration and the
//                           training options (what --resume needs)
//
// Every file is written atomically (temporary file, fsync, rename), state
// last, so a checkpoint killed mid-write leaves the previous one readable.
#pragma once

#include <string>

#include "model/optim.h"
#include "qkv/gpt.h"
#include "qkv/tokenizer.h"

namespace qkv {

GPTConfig config_from_json(const std::string& json, const std::string& name_for_errors);
std::string config_to_json(const GPTConfig& cfg);

// Writes DIR/model.safetensors, DIR/config.json and DIR/vocab.json.
void save_model(const std::string& dir, const GPT& model, const CharTokenizer& tok);

// Reads what save_model wrote; every missing, truncated or tampered file is a
// qkv::Error naming it.
struct LoadedModel {
  GPTConfig config;
  CharTokenizer tokenizer;
  std::vector<float> weights;  // in GPT::params() order
};
LoadedModel load_model(const std::string& dir);

// Copies loaded weights into a model built from the same config.
void set_weights(GPT& model, const std::vector<float>& weights);

// The optimiser state and the iteration to continue from.
void save_train_state(const std::string& dir, AdamW& opt, int64_t next_iter,
                      const std::string& options_json);
struct TrainState {
  int64_t next_iter = 0;
  int64_t adam_steps = 0;
  std::string options_json;
  std::vector<float> m, v;
};
// num_params < 0: accept any length (the caller checks it against the model).
TrainState load_train_state(const std::string& dir, int64_t num_params);

}  // namespace qkv
