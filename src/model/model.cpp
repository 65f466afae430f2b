// model.cpp: qkv::Model, a loaded checkpoint behind one object.
#include "qkv/model.h"

#include <cstring>

#include "model/param_tensors.h"

namespace qkv {

Model Model::load(const std::string& dir) {
  LoadedModel m = load_model(dir);
  auto gpt = std::make_unique<GPT>(m.config);
  set_weights(*gpt, m.weights);
  return Model(std::move(gpt), std::move(m.tokenizer));
}

Model Model::from_tensors(const GPTConfig& cfg, const std::map<std::string, Tensor>& tensors,
                          CharTokenizer tok, const std::string& source) {
  auto gpt = std::make_unique<GPT>(cfg);
  weights_from_tensors(gpt->weights().data(), gpt->params(), tensors, source);
  return Model(std::move(gpt), std::move(tok));
}

void Model::save(const std::string& dir) const { save_model(dir, *gpt_, tokenizer_); }

std::vector<std::pair<std::string, Tensor>> Model::named_weights() const {
  std::vector<Tensor> tensors = param_tensors(*gpt_);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    out.emplace_back(gpt_->params()[i].name, std::move(tensors[i]));
  return out;
}

void Model::set_threads(int threads, Kernel kernel) { gpt_->set_attention(kernel, threads); }

Tensor Model::logits(const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = config().vocab;
  gpt_->forward(tokens.data(), nullptr, 1, T);  // checks T and every id
  Tensor out(DType::f32, {T, V});
  std::memcpy(out.data<float>(), gpt_->logits(), sizeof(float) * static_cast<size_t>(T * V));
  return out;
}

Tensor Model::attention_maps(const std::vector<int32_t>& tokens) {
  return gpt_->attention_maps(tokens.data(), static_cast<int64_t>(tokens.size()));
}

std::vector<int32_t> Model::generate(const SampleOptions& opts,
                                     const std::function<void(const std::string&)>& on_token) {
  return sample(*gpt_, tokenizer_, opts, on_token ? on_token : [](const std::string&) {});
}

}  // namespace qkv
