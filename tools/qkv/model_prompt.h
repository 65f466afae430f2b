// model_prompt.h: the --prompt of the commands that run a trained model
// (explain --model, logits, sample): encoded with the model's tokenizer,
// checked, its unseen characters reported once, and labelled for pictures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "qkv/model.h"
#include "qkv/tokenizer.h"

namespace qkv::cli {

struct Prompt {
  std::vector<int32_t> ids;
  // One per token, as every picture shows it (terminal, PNG, HTML): the
  // character as typed, or Model::token_label; visible_text() either way.
  std::vector<std::string> labels;
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
// labelled by the text they stand for (Model::token_label: "␣the", not
// GPT-2's "Ġthe").
Prompt encode_model_prompt(const std::string& cmd, const Model& m, const std::string& text);

// Model::load(dir) for a command's --model, each of its load warnings on
// one stderr line ("<cmd>: warning: "): the commands that run a model load
// it through here, so that none leaves them unsaid. `quantize` is the
// --quantize flag's value (add_quantize_flag): "none", "q8_0" or "q4_0";
// given for a file (a GGUF file keeps its own types) it is a UsageError.
Model load_model_arg(const std::string& cmd, const std::string& dir, const std::string& quantize = "none");

// The --quantize flag of the commands that run a language model.
void add_quantize_flag(CLI::App* cmd, std::string& quantize);

// For the commands of qkv's language models (logits, sample, export): a
// UsageError naming --model when it is an encoder, which gives `what` no sense.
void refuse_encoder(const Model& m, const std::string& what);

// Refuses (UsageError naming --prompt) an empty prompt and one longer than
// the model's context (its positions end there), counted in the model's
// units (characters for qkv's models, else tokens); `hint`, when given, ends
// the message with what else the user may do.
void check_prompt_fits(const Prompt& p, const Model& m, const std::string& hint = "");

}  // namespace qkv::cli
