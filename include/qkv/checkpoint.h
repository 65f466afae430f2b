/// @file
/// qkv/checkpoint.h: a trained model on disk, loadable by qkv and by PyTorch.
///
///   DIR/model.safetensors   the weights by nanoGPT's names (float32); the
///                           config is repeated in its metadata
///   DIR/config.json         the model's shape (GPTConfig)
///   DIR/vocab.json          the tokenizer
///   DIR/train_state.safetensors  everything --resume needs in ONE file: the
///                           weights, AdamW's moments, the iteration and the
///                           training options
///
/// A checkpoint is written as one set (io/atomic_file.h's FileSet): all four
/// files go to temporaries and are fsynced first, and only then renamed over
/// their predecessors, the state last. An error while writing (a full disk,
/// a directory in the way) replaces nothing, so the previous checkpoint stays
/// whole. Weights, moments and iteration share one file so that a kill during
/// the renames can never pair the weights of one step with the moments of
/// another; model.safetensors may then be one checkpoint newer than the
/// state, which sampling does not mind and resuming ignores.
#pragma once

#include <string>
#include <vector>

#include "qkv/export.h"
#include "qkv/optim.h"
#include "qkv/gpt.h"
#include "qkv/tokenizer.h"

namespace qkv {

/// A model's config.json read strictly (unknown or missing keys refused);
/// errors name `name_for_errors`, the file.
QKV_API GPTConfig config_from_json(const std::string& json, const std::string& name_for_errors);
/// The config.json text that config_from_json reads back.
QKV_API std::string config_to_json(const GPTConfig& cfg);

/// Writes a model on its own (no training state): DIR/config.json,
/// DIR/vocab.json and DIR/model.safetensors, all or none; what load_model reads.
QKV_API void save_model(const std::string& dir, const GPT& model, const CharTokenizer& tok);

/// Writes the whole checkpoint: DIR/config.json, DIR/vocab.json,
/// DIR/model.safetensors and DIR/train_state.safetensors (the resume point:
/// weights, AdamW's moments, `next_iter` and the training options), all or none.
QKV_API void save_checkpoint(const std::string& dir, const GPT& model, const CharTokenizer& tok,
                             AdamW& opt, int64_t next_iter, const std::string& options_json);

/// The lock file qkv train holds in its directory while it runs, and leaves
/// there: DIR/.qkv-train.lock marks DIR as one qkv made.
inline constexpr const char* kTrainLockName = ".qkv-train.lock";

/// Refuses (qkv::Error naming out_dir and force) to write a model into DIR
/// where that could replace files qkv did not write: a user's own
/// config.json, vocab.json or log.jsonl. Allowed: DIR does not exist, is
/// empty, or was made by qkv: it holds kTrainLockName, or a config.json
/// written by qkv (a JSON object with qkv's "arch" key). The files the caller
/// reads (`reads`: a training text kept in DIR, say) and qkv's temporaries
/// do not count. The caller skips the check when asked to force.
QKV_API void refuse_foreign_directory(const std::string& dir, const std::vector<std::string>& reads);

/// A model as load_model reads it from a directory.
struct LoadedModel {
  GPTConfig config;  ///< from config.json
  CharTokenizer tokenizer;  ///< from vocab.json
  std::vector<float> weights;  ///< in GPT::params() order
};
/// Reads what save_checkpoint wrote (train_state aside); every missing, truncated or tampered file is a
/// qkv::Error naming it.
QKV_API LoadedModel load_model(const std::string& dir);

/// Copies loaded weights into a model built from the same config.
QKV_API void set_weights(GPT& model, const std::vector<float>& weights);

/// The resume point in DIR/train_state.safetensors.
struct TrainState {
  int64_t next_iter = 0;  ///< the first step a resumed run takes
  int64_t adam_steps = 0;  ///< AdamW's step count (its bias correction)
  std::string options_json;  ///< the run's TrainOptions::to_json()
  std::vector<float> weights;  ///< in GPT::params() order; the caller checks the length
  std::vector<float> m;  ///< AdamW's first moments, as long as weights
  std::vector<float> v;  ///< AdamW's second moments, as long as weights
};
/// Reads DIR/train_state.safetensors; a missing or damaged file is a
/// qkv::Error naming it.
QKV_API TrainState load_train_state(const std::string& dir);

}  // namespace qkv
