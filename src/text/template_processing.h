// template_processing.h: the special tokens a tokenizer.json's
// TemplateProcessing post-processor puts around one sequence, read the same
// way for every tokenizer qkv reads (byte-level and SentencePiece BPE,
// WordPiece).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv {

/// The ids before and after the text's own.
struct TemplateIds {
  std::vector<int32_t> prefix, suffix;
};

/// A TemplateProcessing object at `path` of the file: its "single" template,
/// a list of {"SpecialToken": {"id": name}} around exactly one
/// {"Sequence": {"id": "A"}}, each name's ids from "special_tokens"[name].ids.
/// "pair" is not read: qkv encodes one sequence at a time. Every id must be
/// one names_token accepts (vocab_size is for the message). Throws
/// qkv::Error(where + path + ": " + why) on anything else; `where` names the
/// file as the caller's other messages do.
TemplateIds read_template_processing(const nlohmann::json& step, const std::string& where,
                                     const std::string& path, int64_t vocab_size,
                                     const std::function<bool(int64_t)>& names_token);

}  // namespace qkv
