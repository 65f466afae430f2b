/// @file
/// qkv/model.h: a trained model, ready to use, in one object.
///
/// The one way `qkv sample`, `qkv logits`, `qkv embed`, `qkv explain
/// --model`, `qkv import`, `qkv export` and the Python package load and run a
/// model, for C++ callers too: load it (checked), tokenize text, run it on
/// token ids, look at its attention, generate text or embed sentences, read
/// or set its weights by name. Two kinds of folder load:
///   - qkv's own (config.json with "arch", vocab.json, model.safetensors):
///     the character-level GPTs `qkv train` makes;
///   - a Hugging Face model folder (config.json with "model_type",
///     model.safetensors or its shards, tokenizer.json or vocab.txt, and
///     sentence-transformers' modules.json when present): BERT-family
///     encoders ("bert"), GPT-2, Llama and Mistral decoders ("gpt2", "llama", "mistral", with
///     their BPE tokenizer.json).
/// The pieces underneath stay public for finer control: the checkpoint files
/// (qkv/checkpoint.h), the network with its KV cache (qkv/gpt.h), sampling
/// (qkv/sampler.h) and training (qkv/trainer.h).
///
///   qkv::Model m = qkv::Model::load("shakespeare");
///   qkv::Tensor logits = m.logits(m.tokenize("ROMEO:"));      // [T, vocab]
///   qkv::Model e = qkv::Model::load("all-MiniLM-L6-v2");
///   qkv::Tensor v = e.embed({"A man is eating.", "Someone eats."});  // [2, 384]
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/checkpoint.h"
#include "qkv/export.h"
#include "qkv/gpt.h"
#include "qkv/sampler.h"
#include "qkv/tokenizer.h"
#include "qkv/weight_type.h"

namespace qkv {

class BpeTokenizer;
class WordPieceTokenizer;

/// How an encoder's token vectors become one vector per text: the Pooling
/// and Normalize modules of a sentence-transformers folder (mean pooling,
/// not normalised, without one).
struct Pooling {
  /// mean, the [CLS] token's vector, the per-channel max, or the sum / sqrt(T).
  enum class Mode { mean, cls, max, mean_sqrt_len };
  Mode mode = Mode::mean;  ///< over the text's tokens, [CLS] and [SEP] included
  bool normalize = false;  ///< divide each vector by its L2 norm
};

/// Options of Model::embed.
struct EmbedOptions {
  int64_t batch = 32;       ///< texts per forward (>= 1)
  int64_t max_length = 0;   ///< tokens per text, specials included; 0: the model's max_length() (see Model::embed_length)
  DType dtype = DType::f32; ///< bfloat16: the Linear layers' products in bf16, summed in float32
  /// Called after each batch with (texts done, texts in all); may be empty.
  std::function<void(int64_t, int64_t)> progress;
  /// Throws qkv::Error naming the first field out of range ("embed options:
  /// batch must be at least 1, found 0"); Model::embed checks it first.
  void validate() const;
};

/// What Model::generate made.
struct Generation {
  std::vector<int32_t> ids;  ///< the generated ids (the end-of-text id too, when it stopped on it)
  /// Their text: every piece on_token was given, put together. For a BPE
  /// model it is decode(ids) as the tokenizer decodes them, without special
  /// tokens unless SampleOptions::special_tokens asks for them.
  std::string text;
  StopReason stop = StopReason::tokens;  ///< why it ended
};

/// `bytes` (a token's text) with every character visible, for labels: a
/// space as "␣" (U+2423, the open box), a newline, tab and carriage return
/// as "\n", "\t" and "\r", other characters that draw nothing a reader can
/// tell apart (controls, format characters such as bidirectional controls,
/// separators, spaces other than U+0020, private-use and unassigned code
/// points, a combining mark with nothing before it) as "U+XXXX", and each
/// byte that is not part of a whole UTF-8 character as "\xNN".
QKV_API std::string visible_text(std::string_view bytes);

/// Options of Model::load.
struct LoadOptions {
  /// A GGUF file's every weight dequantized to float32 (about 4 bytes a
  /// weight): the reference its quantized products are checked against.
  bool dequantize = false;
  /// A folder's (Hugging Face or qkv's own) Linear matrices, head and
  /// embedding table quantized as they are read, with ggml's reference
  /// quantizer (the bits llama.cpp's would write), then run as a GGUF file's
  /// are (qkv/weight.h): WeightType::q8_0 or q4_0; every matrix's rows must
  /// be a multiple of 32. Unset: the weights as stored.
  std::optional<WeightType> quantize;
  /// qkv::Error naming the first field out of range.
  void validate() const;
};

/// A loaded model: its network, its tokenizer and, for an encoder, its pooling.
/// Calls on one Model from several threads are safe: they take turns (each
/// call reuses the network's scratch); separate Models run in parallel.
class QKV_API Model {
 public:
  /// Reads DIR/{config.json, vocab.json, model.safetensors}; every missing,
  /// truncated or inconsistent file is a qkv::Error naming it.
  /// A Hugging Face folder is recognised by config.json's "model_type"; a
  /// model_type, option or tensor qkv does not implement is an error naming it.
  /// A GGUF file (llama.cpp's format: a name ending in .gguf, or its magic)
  /// keeps its matrices as the file stores them, quantized or not
  /// (qkv/weight.h), read where the mapped file holds them.
  static Model load(const std::string& dir);
  /// load() with options (LoadOptions): a GGUF file dequantized, or a
  /// folder's matrices quantized as they are read.
  static Model load(const std::string& dir, const LoadOptions& options);
  /// A model of config `cfg` (validated) whose parameters are taken from
  /// `tensors` by their names (ParamInfo::name: nanoGPT's state_dict names).
  /// Every parameter must be there, float32, of its shape, with finite
  /// values, as load() requires of model.safetensors; the qkv::Error names
  /// the first that is not, after `source` (the file they came from). Tensors no parameter names are not looked at.
  static Model from_tensors(const GPTConfig& cfg, const std::map<std::string, Tensor>& tensors,
                            CharTokenizer tok, const std::string& source);
  /// Writes {config.json, vocab.json, model.safetensors} into the existing
  /// directory dir (save_model).
  void save(const std::string& dir) const;
  /// Every parameter as a named float32 tensor (a copy), in ParamInfo order.
  std::vector<std::pair<std::string, Tensor>> named_weights() const;

  ~Model();
  Model(Model&&) noexcept;             ///< moves the network
  Model& operator=(Model&&) noexcept;  ///< moves the network

  const GPTConfig& config() const { return gpt_->config(); }  ///< the network's shape and block description
  /// "gpt" (qkv's own), or the folder's model_type ("bert").
  const std::string& architecture() const { return architecture_; }
  /// What load() read past that the user should know of, one line each
  /// (a shard index that names the wrong shard for a tensor); the CLI and
  /// the Python package show them as warnings.
  const std::vector<std::string>& load_warnings() const { return load_warnings_; }
  /// An encoder gives hidden states and embeddings, no logits.
  bool is_encoder() const { return !config().lm_head; }
  /// The character tokenizer of qkv's own models; a qkv::Error for another kind.
  const CharTokenizer& tokenizer() const;
  GPT& gpt() { return *gpt_; }  ///< the network itself, for finer control

  /// Text to ids as the model reads it: one id per character (qkv's models),
  /// WordPiece with [CLS] and [SEP], cut to max_length() tokens (an
  /// encoder; *truncated, when given, says whether it was cut), or BPE with
  /// the special tokens its tokenizer.json's post_processor adds (a Llama
  /// folder's beginning-of-text token), as the `tokenizers` library does.
  std::vector<int32_t> tokenize(const std::string& text, bool* truncated = nullptr) const;
  /// The same, cut to max_length tokens instead of max_length() (0: not cut).
  std::vector<int32_t> tokenize(const std::string& text, int64_t max_length, bool* truncated) const;
  /// One id's text: its character, its WordPiece token ("##ing", "[CLS]"),
  /// or its BPE token as tokenizer.json spells it ("Ġthe").
  std::string token_text(int32_t id) const;
  /// One id's text as a reader should see it, as `qkv explain --model`
  /// labels tokens: the text it stands for (GPT-2's "Ġthe" and Llama 2's
  /// "▁the" both " the"; a WordPiece token as spelled, "##ing"), made
  /// visible by visible_text() ("␣the"). A byte token that holds part of a
  /// character shows its bytes ("\xe2").
  std::string token_label(int32_t id) const;
  /// The text of ids (qkv's characters, or a decoder's BPE tokens, special
  /// tokens left out with `skip_special`, as transformers'
  /// skip_special_tokens); an encoder's WordPiece ids are a qkv::Error.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  /// True for qkv's own models, whose tokens are characters (tokenizer()).
  bool reads_characters() const { return chars_.has_value(); }
  /// The most tokens one text may have: the context, or for a
  /// sentence-transformers folder its max_seq_length.
  int64_t max_length() const { return max_length_; }
  const Pooling& pooling() const { return pooling_; }  ///< how embed() pools
  /// The BPE tokenizer of a Hugging Face decoder or a GGUF model; null for others.
  const BpeTokenizer* bpe_tokenizer() const { return bpe_.get(); }
  /// The dtype of the checkpoint's matrices as loaded: bf16 for a Hugging
  /// Face folder whose Linear weights are all BF16 (held as bf16, half the
  /// memory of float32), else float32. generate() computes in it unless
  /// told otherwise.
  DType weights_dtype() const { return weights_dtype_; }

  /// Threads for everything the model runs (0 = all cores) and the attention
  /// kernel; the default is all cores and the automatic kernel.
  void set_threads(int threads, Kernel kernel = Kernel::automatic);

  /// The next-token logits after each prefix of `tokens` (1 <= T <= context,
  /// ids < vocab): [T, vocab] float32. qkv::Error on bad ids or lengths.
  Tensor logits(const std::vector<int32_t>& tokens);
  /// Every layer's and head's attention weights over `tokens`: [layers,
  /// heads, T, T] float32 (GPT::attention_maps).
  Tensor attention_maps(const std::vector<int32_t>& tokens);
  /// The last hidden states of one sequence: [T, C] float32.
  Tensor hidden_states(const std::vector<int32_t>& tokens);
  /// One vector per text, pooled as pooling() says: [n, C] float32. Texts
  /// are tokenized (tokenize()), cut to opts.max_length, and run in batches
  /// of similar lengths; the result is in the texts' order. Encoders only.
  /// *truncated, when given, counts the texts that were cut.
  Tensor embed(const std::vector<std::string>& texts, const EmbedOptions& opts = {},
               int64_t* truncated = nullptr);
  /// The tokens per text embed() keeps under opts: opts.max_length, or the
  /// model's max_length() when it is 0. It may exceed max_length() (as
  /// setting sentence-transformers' max_seq_length does) up to the model's
  /// positions (config().context); beyond is a qkv::Error naming max_length.
  int64_t embed_length(const EmbedOptions& opts) const;
  /// The same from token ids (each 1 .. context long).
  Tensor embed_ids(const std::vector<std::vector<int32_t>>& ids, const EmbedOptions& opts = {});
  /// Generates after opts.prompt (tokenize(): a BPE model's special tokens
  /// around it), streaming the text to on_token in pieces that are final:
  /// put together they are exactly the returned text, whole UTF-8 characters
  /// each, never text a later token would change (see BpeTextStream). Ids
  /// the tokenizer cannot decode (past its vocabulary, in a vocab_size padded
  /// for speed) are never drawn. It stops after opts.tokens tokens, at the
  /// model's end-of-text token, or when the context is full (unless
  /// opts.sliding_window); Generation::stop says which. A prompt longer than
  /// the context is a qkv::Error unless opts.sliding_window (qkv/sampler.h).
  Generation generate(const SampleOptions& opts, const std::function<void(const std::string&)>& on_token = {});

  /// Sequences of their own, side by side on one model (a decoder): each
  /// has a KVCache, its keys and values, made here and owned by the
  /// caller, while the model's weights are shared. The products compute in
  /// `dtype` (unset: weights_dtype(), as generate()); a cache's kv_dtype
  /// unset is what generate() would use there.
  KVCache new_cache(std::optional<DType> kv_dtype = std::nullopt, std::optional<DType> dtype = std::nullopt) const;
  /// Runs tokens (a prompt, or one step) of the sequence whose cache this
  /// is, at positions cache.len() on: the logits [vocab] float32 of the
  /// token after the last (GPT::decode).
  Tensor next_logits(const std::vector<int32_t>& tokens, KVCache& cache, std::optional<DType> dtype = std::nullopt);
  /// One step of B sequences at once: tokens[b] appended to sequence b
  /// (caches[b], each its own length). The weights are read once for all
  /// B rows, so a step of B sequences costs little more than one's:
  /// logits [B, vocab] float32 (GPT::decode_batch).
  Tensor next_logits(const std::vector<int32_t>& tokens, const std::vector<KVCache*>& caches,
                     std::optional<DType> dtype = std::nullopt);

 private:
  Model(std::unique_ptr<GPT> gpt, std::optional<CharTokenizer> tok);
  /// load() of the weights as stored (a GGUF file's dequantized when asked).
  static Model load_as_stored(const std::string& dir, bool dequantize);

  std::unique_ptr<GPT> gpt_;  ///< heavy and address-stable: scratch points into it
  // One call at a time: the network's scratch is reused by every call, so
  // two threads sharing a Model take turns (std::mutex is not movable).
  std::unique_ptr<std::mutex> busy_ = std::make_unique<std::mutex>();
  std::string architecture_ = "gpt";
  std::vector<std::string> load_warnings_;
  std::optional<CharTokenizer> chars_;                   ///< qkv's models
  std::shared_ptr<const WordPieceTokenizer> wordpiece_;  ///< encoders
  std::shared_ptr<const BpeTokenizer> bpe_;              ///< Hugging Face decoders
  Pooling pooling_;
  int64_t max_length_ = 0;
  DType weights_dtype_ = DType::f32;
  std::unique_ptr<KVCache> cache_;  ///< generate()'s, made by its first call and kept (remade for another kv_dtype)
};

}  ///< namespace qkv
