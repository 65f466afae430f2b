// model.cpp: qkv::Model, a loaded checkpoint behind one object.
#include "qkv/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
  const std::string pre = "'" + source + "': ";
  for (const ParamInfo& p : gpt->params()) {
    const auto it = tensors.find(p.name);
    if (it == tensors.end()) throw Error(pre + "missing tensor '" + p.name + "'");
    const Tensor& t = it->second;
    if (t.dtype() != DType::f32)
      throw Error(pre + "tensor '" + p.name + "' should be float32, found " + dtype_name(t.dtype()));
    if (t.shape() != p.shape)
      throw Error(pre + "tensor '" + p.name + "' should be " + shape_str(p.shape) + ", found " +
                  shape_str(t.shape()));
    const float* src = t.data<float>();
    if (!std::all_of(src, src + p.size, [](float x) { return std::isfinite(x); }))
      throw Error(pre + "tensor '" + p.name + "' holds a non-finite value");
    std::copy_n(src, p.size, gpt->weights().data() + p.offset);
  }
  return Model(std::move(gpt), std::move(tok));
}

void Model::save(const std::string& dir) const { save_model(dir, *gpt_, tokenizer_); }

std::vector<std::pair<std::string, Tensor>> Model::named_weights() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(gpt_->params().size());
  for (const ParamInfo& p : gpt_->params()) {
    Tensor t(DType::f32, p.shape);
    std::copy_n(gpt_->weights().data() + p.offset, p.size, t.data<float>());
    out.emplace_back(p.name, std::move(t));
  }
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
