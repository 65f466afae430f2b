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
  /// compute, float32 otherwise. Read where the cache is made (sample_ids'
  /// own, Model::generate's); a cache passed in is used as it is.
  std::optional<DType> kv_dtype = std::nullopt;
  /// Throws qkv::Error naming the first field out of range ("temperature:
  /// expected a finite number >= 0 (0 = greedy), found -1"); sample_ids()
  /// and Model::generate check it first.
  void validate() const;
};

/// The distribution the next token is drawn from, given the model's logits
/// [V]: softmax(logits / temperature) over the tokens that survive, in this
/// order: `excluded` removed (the tokenizer's fallback id: it stands for no
/// character of the training text, so drawing it could only print U+FFFD;
/// -1 = none), the top_k likeliest kept (ties with the k-th kept too), then
/// the smallest set of likeliest tokens whose probability reaches top_p
/// (nucleus sampling; computed on the tempered, top-k distribution). With
/// temperature 0 all the mass goes to the likeliest surviving token, the
/// lowest id on ties: greedy decoding. Returns probabilities [V] summing to 1,
/// zero outside the set. Throws qkv::Error on options out of range.
QKV_API std::vector<double> next_token_probs(const float* logits, int64_t V, const SampleOptions& o,
                                             int32_t excluded);

/// The first token whose cumulative probability exceeds u in [0, 1) (inverse
/// CDF); a one-hot `probs` gives its token whatever u.
QKV_API int32_t pick_token(const std::vector<double>& probs, double u);

/// Generates opts.tokens tokens after the prompt, calling on_token with the
/// text of each as it is produced, and returns the generated ids. With or
/// without the cache the tokens are the same for the same seed: the cache
/// only avoids recomputing the keys and values of earlier positions (under
/// bf16 compute both run attention in bf16 unless the cache is float32, and
/// the two sum in different orders, so a near-tie may go either way). Past the
/// context, both crop to the last `context` tokens (as nanoGPT does), the
/// cached path by rebuilding its cache for the cropped window. Each token is
/// drawn from next_token_probs(..., tok.unknown_id()) with one uniform number.
/// `cache`, when given, is a cache of this model's (GPT::new_cache) used
/// instead of one made for the call: a caller that generates again passes
/// the same one, whose memory is then already mapped and written.
QKV_API std::vector<int32_t> sample(GPT& model, const CharTokenizer& tok, const SampleOptions& opts,
                                    const std::function<void(const std::string&)>& on_token,
                                    KVCache* cache = nullptr);

/// The loop under sample(), on ids, for any tokenizer: continues `prompt`
/// (at least one id, each in the vocabulary) with up to opts.tokens ids
/// drawn as sample() draws them (excluding `excluded`, -1 = none), handing
/// each to on_id as it comes, and returns them. Stops after generating
/// `stop_id` (an end-of-text id, returned too; -1 = never). opts.prompt is
/// not read. `cache` as for sample().
QKV_API std::vector<int32_t> sample_ids(GPT& model, std::vector<int32_t> prompt, const SampleOptions& opts,
                                        int32_t excluded, int32_t stop_id,
                                        const std::function<void(int32_t)>& on_id, KVCache* cache = nullptr);

}  // namespace qkv
