// qkv/model.h: a trained model, ready to use, in one object.
//
// The one way `qkv sample`, `qkv logits`, `qkv explain --model`, `qkv
// import`, `qkv export` and the Python package load and run a model, for C++
// callers too: load it (checked), run it on token ids, look at its
// attention, generate text, read or set its weights by name. The pieces
// underneath stay public for finer control: the checkpoint files
// (qkv/checkpoint.h), the network with its KV cache (qkv/gpt.h), sampling
// (qkv/sampler.h) and training (qkv/trainer.h).
//
//   qkv::Model m = qkv::Model::load("shakespeare");
//   qkv::Tensor logits = m.logits(m.tokenizer().encode("ROMEO:"));   // [T, vocab]
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/checkpoint.h"
#include "qkv/export.h"
#include "qkv/gpt.h"
#include "qkv/sampler.h"
#include "qkv/tokenizer.h"

namespace qkv {

class QKV_API Model {
 public:
  // Reads DIR/{config.json, vocab.json, model.safetensors}; every missing,
  // truncated or inconsistent file is a qkv::Error naming it.
  static Model load(const std::string& dir);
  // A model of config `cfg` (validated) whose parameters are taken from
  // `tensors` by their names (ParamInfo::name: nanoGPT's state_dict names).
  // Every parameter must be there, float32, of its shape, with finite
  // values, as load() requires of model.safetensors; the qkv::Error names
  // the first that is not, after `source` (the file they came from). Tensors no parameter names are not looked at.
  static Model from_tensors(const GPTConfig& cfg, const std::map<std::string, Tensor>& tensors,
                            CharTokenizer tok, const std::string& source);
  // Writes {config.json, vocab.json, model.safetensors} into the existing
  // directory dir (save_model).
  void save(const std::string& dir) const;
  // Every parameter as a named float32 tensor (a copy), in ParamInfo order.
  std::vector<std::pair<std::string, Tensor>> named_weights() const;

  const GPTConfig& config() const { return gpt_->config(); }
  const CharTokenizer& tokenizer() const { return tokenizer_; }
  GPT& gpt() { return *gpt_; }

  // Threads for everything the model runs (0 = all cores) and the attention
  // kernel; the default is all cores and the automatic kernel.
  void set_threads(int threads, Kernel kernel = Kernel::automatic);

  // The next-token logits after each prefix of `tokens` (1 <= T <= context,
  // ids < vocab): [T, vocab] float32. qkv::Error on bad ids or lengths.
  Tensor logits(const std::vector<int32_t>& tokens);
  // Every layer's and head's attention weights over `tokens`: [layers,
  // heads, T, T] float32 (GPT::attention_maps).
  Tensor attention_maps(const std::vector<int32_t>& tokens);
  // Generates after opts.prompt, streaming each piece of text to on_token;
  // returns the generated ids (qkv/sampler.h).
  std::vector<int32_t> generate(const SampleOptions& opts,
                                const std::function<void(const std::string&)>& on_token = {});

 private:
  Model(std::unique_ptr<GPT> gpt, CharTokenizer tok) : gpt_(std::move(gpt)), tokenizer_(std::move(tok)) {}
  std::unique_ptr<GPT> gpt_;  // heavy and address-stable: scratch points into it
  CharTokenizer tokenizer_;
};

}  // namespace qkv
