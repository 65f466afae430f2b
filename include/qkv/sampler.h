// qkv/sampler.h: text generation from a trained GPT.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/gpt.h"
#include "qkv/tokenizer.h"

namespace qkv {

struct SampleOptions {
  std::string prompt = "\n";  // nanoGPT's default start
  int64_t tokens = 500;
  double temperature = 1.0;  // > 0; lower is more conservative
  int64_t top_k = 0;         // keep only the k most likely tokens; 0 = all
  uint64_t seed = 1337;
  bool use_cache = true;     // KV cache; false recomputes the whole context each step
};

// Generates opts.tokens tokens after the prompt, calling on_token with the
// text of each as it is produced, and returns the generated ids. With or
// without the cache the tokens are the same for the same seed: the cache
// only avoids recomputing the keys and values of earlier positions. Past the
// context, both crop to the last `context` tokens (as nanoGPT does), the
// cached path by rebuilding its cache for the cropped window.
std::vector<int32_t> sample(GPT& model, const CharTokenizer& tok, const SampleOptions& opts,
                            const std::function<void(const std::string&)>& on_token);

}  // namespace qkv
