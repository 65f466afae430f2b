/// @file
/// qkv/sampler.h: text generation from a trained GPT.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/export.h"
#include "qkv/gpt.h"
#include "qkv/tokenizer.h"

namespace qkv {

/// How sample() draws: the prompt, how many tokens and the sampling rule.
struct SampleOptions {
  std::string prompt = "\n";  ///< nanoGPT's default start
  int64_t tokens = 500;      ///< tokens to generate after the prompt
  double temperature = 1.0;  ///< >= 0; lower is more conservative, 0 = greedy (argmax)
  int64_t top_k = 0;         ///< keep only the k most likely tokens; 0 = all
  double top_p = 1.0;        ///< nucleus: in (0, 1]; 1 = all
  uint64_t seed = 1337;      ///< seed of the draws
  bool use_cache = true;     ///< KV cache; false recomputes the whole context each step
  /// The Linear layers' products: float32, or bf16 (operands rounded to
  /// bfloat16, float32 sums; bf16 weights read as they are); unset: the
  /// dtype of the model's weights (Model::weights_dtype(): bf16 for a bf16
  /// checkpoint). Model::generate applies it; sample() and sample_ids() run
  /// the model as it is set.
  std::optional<DType> dtype = std::nullopt;
  /// The KV cache's keys and values: float32, or bf16 (half the memory;
  /// attention runs the bf16 kernel on them); unset: bf16 under bf16
  /// compute or for a quantized model (GPT::default_kv_dtype), float32
  /// otherwise. Read where the cache is made (sample_ids' own,
  /// Model::generate's); a cache passed in is used as it is.
  std::optional<DType> kv_dtype = std::nullopt;
  /// What happens when the sequence fills the model's context (its positions
  /// end there): false (the default), generation stops, StopReason::context,
  /// and a prompt longer than the context is refused; true, it goes on from
  /// the last `context` tokens, their positions starting again at 0, as
  /// nanoGPT's sample.py does (the model then no longer sees the start).
  bool sliding_window = false;
  /// Model::generate's text: false (the default), special tokens such as the
  /// end-of-text token are left out of it, as transformers' decode(...,
  /// skip_special_tokens=True) leaves them; true, they are in it.
  bool special_tokens = false;
  /// Throws qkv::Error naming the first field out of range ("temperature:
  /// expected a finite number >= 0 (0 = greedy), found -1"); sample_ids()
  /// and Model::generate check it first.
  void validate() const;
};

/// Why generation ended.
enum class StopReason {
  tokens,       ///< SampleOptions::tokens were generated
  end_of_text,  ///< the model generated its end-of-text token
  context,      ///< the sequence filled the model's context (SampleOptions::sliding_window is off)
};

/// "tokens", "end_of_text" or "context".
QKV_API const char* stop_reason_name(StopReason why);

/// The distribution the next token is drawn from, given the model's logits
/// [V]: softmax(logits / temperature) over the tokens that survive, in this
/// order: the `excluded` ids removed (ids the tokenizer cannot decode: the
/// character tokenizer's fallback id, which stands for no character of the
/// training text, or the ids past a Hugging Face tokenizer's vocabulary in a
/// model whose vocab_size was padded; ids outside [0, V) are ignored), the top_k likeliest kept (ties with the k-th kept too), then
/// the smallest set of likeliest tokens whose probability reaches top_p
/// (nucleus sampling; computed on the tempered, top-k distribution). With
/// temperature 0 all the mass goes to the likeliest surviving token, the
/// lowest id on ties: greedy decoding. Returns probabilities [V] summing to 1,
/// zero outside the set. Throws qkv::Error on options out of range.
QKV_API std::vector<double> next_token_probs(const float* logits, int64_t V, const SampleOptions& o,
                                             const std::vector<int32_t>& excluded);

/// The first token whose cumulative probability exceeds u in [0, 1) (inverse
/// CDF); a one-hot `probs` gives its token whatever u.
QKV_API int32_t pick_token(const std::vector<double>& probs, double u);

/// Generates opts.tokens tokens after the prompt, calling on_token with the
/// text of each as it is produced, and returns the generated ids. With or
/// without the cache the tokens are the same for the same seed: the cache
/// only avoids recomputing the keys and values of earlier positions (under
/// bf16 compute both run attention in bf16 unless the cache is float32, and
/// the two sum in different orders, so a near-tie may go either way). At the
/// context it stops, or with opts.sliding_window crops to the last `context`
/// tokens (the cached path rebuilding its cache for the cropped window); see
/// sample_ids. Each token is drawn from next_token_probs(..., {tok.unknown_id()})
/// with one uniform number.
/// `cache`, when given, is a cache of this model's (GPT::new_cache) used
/// instead of one made for the call: a caller that generates again passes
/// the same one, whose memory is then already mapped and written.
QKV_API std::vector<int32_t> sample(GPT& model, const CharTokenizer& tok, const SampleOptions& opts,
                                    const std::function<void(const std::string&)>& on_token,
                                    KVCache* cache = nullptr, StopReason* stop = nullptr);

/// The loop under sample(), on ids, for any tokenizer: continues `prompt`
/// (at least one id, each in the vocabulary) with up to opts.tokens ids
/// drawn as sample() draws them (never one of `excluded`), handing each to
/// on_id as it comes, and returns them. Stops after generating `stop_id` (an
/// end-of-text id, returned too; -1 = never), or when the sequence fills the
/// model's context: the model reads at most `context` tokens, so at most
/// context + 1 - prompt.size() tokens follow a prompt (opts.sliding_window
/// goes on instead, each step reading the last `context` tokens). A prompt
/// longer than the context is a qkv::Error without opts.sliding_window.
/// *stop, when given, says which of the three ended it. opts.prompt is not
/// read. `cache` as for sample().
QKV_API std::vector<int32_t> sample_ids(GPT& model, std::vector<int32_t> prompt, const SampleOptions& opts,
                                        const std::vector<int32_t>& excluded, int32_t stop_id,
                                        const std::function<void(int32_t)>& on_id, KVCache* cache = nullptr,
                                        StopReason* stop = nullptr);

}  // namespace qkv
