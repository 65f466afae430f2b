// sentence.h: a sentence-transformers folder's modules (modules.json): how
// token vectors become one text vector, and how long a text may be.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/model.h"

namespace qkv::hf {

struct SentenceModules {
  Pooling pooling;         // mean, not normalised, when the folder has no modules.json
  int64_t max_length = 0;  // sentence_bert_config.json's max_seq_length, else the context
};

// Reads dir/modules.json (Transformer, Pooling, Normalize) with the Pooling
// module's config.json and dir/sentence_bert_config.json. A module or
// pooling mode qkv does not implement is a qkv::Error naming it, and so is
// a length (max_seq_length, else config.json's max_position_embeddings,
// `context`) too short for `specials`, the tokens the tokenizer adds to
// every text ([CLS] and [SEP]).
SentenceModules read_sentence_modules(const std::string& dir, int64_t context,
                                      const std::vector<std::string>& specials);

// out [C] = the pooled vector of one text's hidden states h [T, C] (T >= 1),
// normalised to unit L2 norm when p says so. Sums in double.
void pool(float* out, const float* h, int64_t T, int64_t C, const Pooling& p);

}  // namespace qkv::hf
