// model_prompt.h: the --prompt of the commands that run a trained model
// (explain --model, logits, sample): encoded with the model's tokenizer,
// checked, its unseen characters reported once, and labelled for pictures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/model.h"
#include "qkv/tokenizer.h"

namespace qkv::cli {

struct Prompt {
  std::vector<int32_t> ids;         // one token per character
  std::vector<std::string> chars;   // the UTF-8 of each token: a character as typed, or a word piece
};

// Encodes `text` with the model's tokenizer. Invalid UTF-8 is a UsageError
// naming --prompt. Characters the training text never had become the
// tokenizer's unknown id; they are reported on ONE stderr line
// ("<cmd>: warning: ..."), each distinct character once however often it
// occurs, so a long prompt cannot flood the terminal.
Prompt encode_prompt(const std::string& cmd, const CharTokenizer& tok, const std::string& text);

// The prompt as any model reads it: characters for qkv's models (as
// above), an encoder's WordPiece tokens ([CLS] ... [SEP], cut to its
// max_length with one stderr line saying so) or a decoder's BPE tokens,
// labelled by their text.
Prompt encode_model_prompt(const std::string& cmd, const Model& m, const std::string& text);

// For the commands of qkv's language models (logits, sample, export): a
// UsageError naming --model when it is an encoder, which gives `what` no sense.
void refuse_encoder(const Model& m, const std::string& what);

// For commands that run the whole prompt through the model in one pass
// (explain, logits): refuses an empty prompt and one longer than the model's
// context (its positions end there), naming --prompt.
void check_prompt_fits(const Prompt& p, int64_t context);

// One label per token for heatmaps and the HTML page: the character, with
// the space as '␣' and control characters escaped ("\n"), so that every
// label is visible.
std::vector<std::string> token_labels(const Prompt& p);

}  // namespace qkv::cli
