// model.cpp: qkv::Model, a loaded model behind one object: qkv's own
// checkpoints and Hugging Face folders, run by the one GPT code path.
#include "qkv/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/runtime/interrupt.h"
#include "model/gguf_model.h"
#include "model/gpt_work.h"
#include "model/hf/hf_folder.h"
#include "model/hf/sentence.h"
#include "model/param_tensors.h"
#include "qkv/bpe.h"
#include "qkv/runtime.h"
#include "qkv/wordpiece.h"

namespace qkv {
namespace {

// Runs the network's Linear products in `dtype` until the scope ends, then
// as before, however it ends.
class ComputeDtypeScope {
 public:
  ComputeDtypeScope(GPT& gpt, DType dtype) : gpt_(gpt), before_(gpt.compute_dtype()) {
    gpt_.set_compute_dtype(dtype);
  }
  ~ComputeDtypeScope() { gpt_.set_compute_dtype(before_); }
  ComputeDtypeScope(const ComputeDtypeScope&) = delete;
  ComputeDtypeScope& operator=(const ComputeDtypeScope&) = delete;

 private:
  GPT& gpt_;
  DType before_;
};

}  // namespace

void EmbedOptions::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("embed options: " + what);
  };
  need(batch >= 1, "batch must be at least 1, found " + std::to_string(batch));
  need(max_length == 0 || max_length >= 2,
       "max_length must be 0 (the model's maximum) or at least 2 ([CLS] and [SEP]), found " +
           std::to_string(max_length));
  need(dtype == DType::f32 || dtype == DType::bf16,
       std::string("dtype must be float32 or bfloat16, found ") + dtype_name(dtype));
}

Model::Model(std::unique_ptr<GPT> gpt, std::optional<CharTokenizer> tok)
    : gpt_(std::move(gpt)), chars_(std::move(tok)), max_length_(gpt_->config().context) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

void LoadOptions::validate() const {
  if (quantize && *quantize != WeightType::q8_0 && *quantize != WeightType::q4_0)
    throw Error(std::string("load options: quantize must be Q8_0 or Q4_0, found ") + weight_type_info(*quantize).name);
  if (quantize && dequantize) throw Error("load options: quantize and dequantize exclude each other");
}

Model Model::load(const std::string& dir) { return load(dir, LoadOptions{}); }

Model Model::load(const std::string& dir, const LoadOptions& options) {
  options.validate();
  if (options.quantize && gguf::is_gguf_file(dir))
    throw Error("'" + dir + "': a GGUF file keeps its own weight types; quantize applies to a folder's weights");
  Model m = load_as_stored(dir, options.dequantize);
  if (options.quantize) {
    GptLoader::quantize_matrices(*m.gpt_, *options.quantize);
    m.weights_dtype_ = DType::f32;
  }
  return m;
}

Model Model::load_as_stored(const std::string& dir, bool dequantize) {
  if (gguf::is_gguf_file(dir)) {
    gguf::GgufModel g = gguf::load_model(dir, dequantize);
    Model m(std::move(g.gpt), std::nullopt);
    m.architecture_ = g.architecture;
    m.bpe_ = std::move(g.tokenizer);
    return m;
  }
  if (hf::is_hf_folder(dir)) {
    const hf::Architecture arch = hf::read_architecture(dir);
    Model m(hf::load_weights(dir, arch), std::nullopt);
    m.architecture_ = arch.model_type;
    m.load_warnings_ = arch.checkpoint.warnings;
    m.weights_dtype_ = m.gpt_->matrices_dtype();
    if (arch.config.lm_head) {  // a decoder: byte-level BPE
      m.bpe_ = std::make_shared<const BpeTokenizer>(BpeTokenizer::from_folder(dir));
      if (m.bpe_->vocab_size() > arch.config.vocab)
        throw Error("'" + dir + "': the tokenizer has " + std::to_string(m.bpe_->vocab_size()) +
                    " tokens, the model's vocab_size is " + std::to_string(arch.config.vocab));
      return m;
    }
    m.wordpiece_ = std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_folder(dir));
    if (m.wordpiece_->vocab_size() > arch.config.vocab)
      throw Error("'" + dir + "': the tokenizer has " + std::to_string(m.wordpiece_->vocab_size()) +
                  " tokens, the model's vocab_size is " + std::to_string(arch.config.vocab));
    std::vector<std::string> specials;  // [CLS] and [SEP], as the tokenizer adds them
    for (const int32_t id : m.wordpiece_->encode("")) specials.push_back(m.wordpiece_->token(id));
    const hf::SentenceModules st = hf::read_sentence_modules(dir, arch.config.context, specials);
    m.pooling_ = st.pooling;
    m.max_length_ = st.max_length;
    return m;
  }
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

const CharTokenizer& Model::tokenizer() const {
  if (!chars_)
    throw Error("model: a " + architecture_ + " model reads " + (bpe_ ? "BPE" : "WordPiece") +
                " tokens, not qkv's characters: tokenize() gives its ids and token_text() each id's token");
  return *chars_;
}

void Model::save(const std::string& dir) const { save_model(dir, *gpt_, tokenizer()); }

std::vector<std::pair<std::string, Tensor>> Model::named_weights() const {
  std::vector<Tensor> tensors = param_tensors(*gpt_);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    out.emplace_back(gpt_->params()[i].name, std::move(tensors[i]));
  return out;
}



void Model::set_threads(int threads, Kernel kernel) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  gpt_->set_attention(kernel, threads);
}

std::vector<int32_t> Model::tokenize(const std::string& text, bool* truncated) const {
  if (wordpiece_) return wordpiece_->encode(text, max_length_, truncated);
  if (bpe_) return bpe_->encode_with_specials(text, 0, truncated);
  if (truncated) *truncated = false;
  return tokenizer().encode(text);
}

std::vector<int32_t> Model::tokenize(const std::string& text, int64_t max_length, bool* truncated) const {
  if (wordpiece_) return wordpiece_->encode(text, max_length, truncated);
  if (bpe_) return bpe_->encode_with_specials(text, max_length, truncated);
  std::vector<int32_t> ids = tokenizer().encode(text);
  const bool cut = max_length > 0 && static_cast<int64_t>(ids.size()) > max_length;
  if (cut) ids.resize(static_cast<size_t>(max_length));
  if (truncated) *truncated = cut;
  return ids;
}

std::string Model::token_text(int32_t id) const {
  if (wordpiece_) {
    if (id < 0 || id >= wordpiece_->vocab_size())
      throw Error("model: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                  std::to_string(wordpiece_->vocab_size()) + ")");
    return wordpiece_->token(id);
  }
  if (bpe_) return bpe_->token(id);  // as the file spells it: a byte token alone is no text
  return tokenizer().decode({id});
}

std::string Model::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  if (bpe_) return bpe_->decode(ids, skip_special);
  if (wordpiece_)
    throw Error("decode: a " + architecture_ + " model's WordPiece ids have no decoder here; "
                "token_text() gives each id's token");
  return tokenizer().decode(ids);
}

Tensor Model::logits(const std::vector<int32_t>& tokens) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  const int64_t T = static_cast<int64_t>(tokens.size()), V = config().vocab;
  gpt_->forward(tokens.data(), nullptr, 1, T);  // checks T and every id
  Tensor out(DType::f32, {T, V});
  std::memcpy(out.data<float>(), gpt_->logits(), sizeof(float) * static_cast<size_t>(T * V));
  return out;
}

Tensor Model::attention_maps(const std::vector<int32_t>& tokens) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  return gpt_->attention_maps(tokens.data(), static_cast<int64_t>(tokens.size()));
}

Tensor Model::hidden_states(const std::vector<int32_t>& tokens) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  const int64_t T = static_cast<int64_t>(tokens.size()), C = config().embd;
  const std::span<const float> h = gpt_->hidden_states(tokens.data(), std::span<const int64_t>(&T, 1));
  Tensor out(DType::f32, {T, C});
  std::copy(h.begin(), h.end(), out.data<float>());
  return out;
}

Tensor Model::embed(const std::vector<std::string>& texts, const EmbedOptions& opts,
                    int64_t* truncated) {
  const int64_t limit = embed_length(opts);
  std::vector<std::vector<int32_t>> ids(texts.size());
  int64_t cut = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    bool t = false;
    try {
      ids[i] = tokenize(texts[i], limit, &t);
    } catch (const Error& e) {
      throw Error("embed: text " + std::to_string(i) + ": " + e.what());
    }
    cut += t;
  }
  if (truncated) *truncated = cut;
  return embed_ids(ids, opts);
}

int64_t Model::embed_length(const EmbedOptions& opts) const {
  opts.validate();
  if (opts.max_length > config().context)
    throw Error("embed options: max_length " + std::to_string(opts.max_length) + " is more than the model's " +
                std::to_string(config().context) + " positions");
  return opts.max_length ? opts.max_length : max_length_;
}

Tensor Model::embed_ids(const std::vector<std::vector<int32_t>>& ids, const EmbedOptions& opts) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  if (!is_encoder())
    throw Error("embed: a " + architecture_ + " language model gives logits, not embeddings: load an encoder");
  opts.validate();
  const int64_t n = static_cast<int64_t>(ids.size()), C = config().embd;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i].empty() || static_cast<int64_t>(ids[i].size()) > config().context)
      throw Error("embed: text " + std::to_string(i) + " has " + std::to_string(ids[i].size()) +
                  " tokens, expected 1 .. " + std::to_string(config().context));
  Tensor out(DType::f32, {n, C});
  // Longest first, so each batch's texts are of similar lengths (as
  // sentence-transformers orders them); results go back to their rows.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ids[a].size() > ids[b].size(); });
  const ComputeDtypeScope compute(*gpt_, opts.dtype);
  std::vector<int32_t> packed;
  std::vector<int64_t> lengths;
  // Between batches the caller's InterruptScope may stop the run: one batch
  // is often shorter than the kernels' own polling interval.
  Interrupt interrupt;
  for (int64_t b0 = 0; b0 < n; b0 += opts.batch) {
    interrupt.check();
    const int64_t b1 = std::min(n, b0 + opts.batch);
    packed.clear(), lengths.clear();
    for (int64_t j = b0; j < b1; ++j) {
      const std::vector<int32_t>& t = ids[order[j]];
      packed.insert(packed.end(), t.begin(), t.end());
      lengths.push_back(static_cast<int64_t>(t.size()));
    }
    const float* h = gpt_->hidden_states(packed.data(), lengths).data();
    for (int64_t j = b0; j < b1; ++j) {
      const int64_t len = lengths[j - b0];
      hf::pool(out.data<float>() + order[j] * C, h, len, C, pooling_);
      h += len * C;
    }
    if (opts.progress) opts.progress(b1, n);
  }
  return out;
}

Generation Model::generate(const SampleOptions& opts, const std::function<void(const std::string&)>& on_token) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  if (is_encoder())
    throw Error("generate: a " + architecture_ + " model is an encoder, with no language-model head: "
                "it gives embeddings and hidden states, not text");
  opts.validate();
  const DType dtype = opts.dtype.value_or(weights_dtype_);
  const ComputeDtypeScope compute(*gpt_, dtype);
  const DType kv_dtype = opts.kv_dtype.value_or(gpt_->default_kv_dtype(dtype));
  if (opts.use_cache && (!cache_ || cache_->dtype() != kv_dtype))
    cache_ = std::make_unique<KVCache>(gpt_->new_cache(kv_dtype));
  KVCache* cache = opts.use_cache ? cache_.get() : nullptr;
  Generation g;
  const auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    g.text += piece;
    if (on_token) on_token(piece);
  };
  if (!bpe_) {
    g.ids = sample(*gpt_, tokenizer(), opts, emit, cache, &g.stop);
    return g;
  }
  // As the tokenizer's post_processor says (Llama's beginning-of-text token
  // in front); still empty, the text starts from the beginning-of-text
  // token the config names, when there is one.
  std::vector<int32_t> prompt = bpe_->encode_with_specials(opts.prompt);
  if (prompt.empty() && bpe_->bos_id() >= 0) prompt.push_back(bpe_->bos_id());
  if (prompt.empty())
    throw Error("generate: the prompt is empty and the tokenizer names no beginning-of-text token");
  // A vocab_size padded past the tokenizer's (GPT-2's 50257 to 50304, for
  // faster products) leaves ids with no text: they are never drawn.
  std::vector<int32_t> no_text;
  for (int32_t id = 0; id < config().vocab; ++id)
    if (!bpe_->has_token(id)) no_text.push_back(id);
  BpeTextStream stream(*bpe_, !opts.special_tokens);
  g.ids = sample_ids(
      *gpt_, std::move(prompt), opts, no_text, bpe_->eos_id(), [&](int32_t id) { emit(stream.push(id)); }, cache,
      &g.stop);
  emit(stream.finish());
  return g;
}

KVCache Model::new_cache(std::optional<DType> kv_dtype, std::optional<DType> dtype) const {
  if (is_encoder()) throw Error("new_cache: a " + architecture_ + " model is an encoder: it decodes nothing");
  return gpt_->new_cache(kv_dtype.value_or(gpt_->default_kv_dtype(dtype.value_or(weights_dtype_))));
}

Tensor Model::next_logits(const std::vector<int32_t>& tokens, KVCache& cache, std::optional<DType> dtype) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  const ComputeDtypeScope compute(*gpt_, dtype.value_or(weights_dtype_));
  const std::span<const float> l = gpt_->decode(tokens.data(), static_cast<int64_t>(tokens.size()), cache);
  Tensor out(DType::f32, {static_cast<int64_t>(l.size())});
  std::copy(l.begin(), l.end(), out.data<float>());
  return out;
}

Tensor Model::next_logits(const std::vector<int32_t>& tokens, const std::vector<KVCache*>& caches,
                         std::optional<DType> dtype) {
  const std::lock_guard<std::mutex> one_at_a_time(*busy_);
  const ComputeDtypeScope compute(*gpt_, dtype.value_or(weights_dtype_));
  const std::span<const float> l = gpt_->decode_batch(tokens, caches);
  Tensor out(DType::f32, {static_cast<int64_t>(caches.size()), config().vocab});
  std::copy(l.begin(), l.end(), out.data<float>());
  return out;
}

}  // namespace qkv
