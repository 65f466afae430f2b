#include "model_prompt.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli_common.h"
#include "qkv/error.h"

namespace qkv::cli {
namespace {

// The code point of one valid UTF-8 character (encode() has checked it).
uint32_t code_point(const std::string& c) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(c[i]) & 0x3Fu; };
  const auto b0 = static_cast<unsigned char>(c[0]);
  switch (c.size()) {
    case 1: return b0;
    case 2: return (b0 & 0x1Fu) << 6 | b(1);
    case 3: return (b0 & 0x0Fu) << 12 | b(1) << 6 | b(2);
    default: return (b0 & 0x07u) << 18 | b(1) << 12 | b(2) << 6 | b(3);
  }
}

std::string u_plus(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

}  // namespace

Model load_model_arg(const std::string& cmd, const std::string& dir, const std::string& quantize) {
  LoadOptions options;
  if (quantize != "none") {
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir, ec))
      throw UsageError("--quantize: '" + dir + "' is a file, which keeps its own weight types; --quantize "
                       "quantizes a model folder's weights as they are read");
    options.quantize = quantize == "q8_0" ? WeightType::q8_0 : WeightType::q4_0;
  }
  Model m = Model::load(dir, options);
  for (const std::string& w : m.load_warnings()) std::cerr << cmd << ": warning: " << w << "\n";
  return m;
}

void add_quantize_flag(CLI::App* cmd, std::string& quantize) {
  cmd->add_option("--quantize", quantize,
                  "quantize a folder's matrices as they are read, as llama.cpp's Q8_0 (8.5 bits a weight) or "
                  "Q4_0 (4.5) store them, and run them so: about a half (a quarter) of bf16's memory and of "
                  "the bytes each token reads; none: the weights as stored")
      ->check(CLI::IsMember({"none", "q8_0", "q4_0"}))
      ->capture_default_str();
}

void refuse_encoder(const Model& m, const std::string& what) {
  if (m.is_encoder())
    throw UsageError("--model: a " + m.architecture() + " encoder has no language-model head to give " +
                     what + " (qkv embed and qkv explain --model read encoders)");
}

Prompt encode_model_prompt(const std::string& cmd, const Model& m, const std::string& text) {
  if (m.reads_characters()) return encode_prompt(cmd, m.tokenizer(), text);
  Prompt p;
  bool cut = false;
  try {
    p.ids = m.tokenize(text, &cut);
  } catch (const Error& e) {
    throw UsageError(std::string("--prompt: ") + e.what());
  }
  if (cut)
    std::cerr << cmd << ": warning: --prompt cut to the model's " << m.max_length() << " tokens\n";
  for (const int32_t id : p.ids) p.labels.push_back(m.token_label(id));
  return p;
}

Prompt encode_prompt(const std::string& cmd, const CharTokenizer& tok, const std::string& text) {
  Prompt p;
  try {
    p.ids = tok.encode(text);
  } catch (const Error& e) {
    throw UsageError(std::string("--prompt: ") + e.what());
  }
  // Valid UTF-8 now: a character starts at every byte that is not a
  // continuation byte (10xxxxxx).
  std::vector<std::string> chars;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) chars.emplace_back();
    chars.back() += text[i];
  }
  // As typed, also where the model reads the unknown token: the label says
  // what was there.
  for (const std::string& c : chars) p.labels.push_back(visible_text(c));
  std::vector<std::string> unseen;
  for (size_t i = 0; i < p.ids.size(); ++i)
    if (p.ids[i] == tok.unknown_id() &&
        std::find(unseen.begin(), unseen.end(), chars[i]) == unseen.end())
      unseen.push_back(chars[i]);
  if (!unseen.empty()) {
    std::string list;
    for (const std::string& c : unseen) {
      const uint32_t cp = code_point(c);
      const bool printable = cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0);
      list += (list.empty() ? "" : ", ") + (printable ? "'" + c + "' " : std::string()) + u_plus(cp);
    }
    std::cerr << cmd << ": warning: --prompt: " << unseen.size()
              << (unseen.size() == 1 ? " character" : " characters")
              << " not in the model's vocabulary, read as its unknown token: " << list << "\n";
  }
  return p;
}

void check_prompt_fits(const Prompt& p, const Model& m, const std::string& hint) {
  const auto n = static_cast<int64_t>(p.ids.size());
  const int64_t context = m.config().context;
  const std::string unit = m.reads_characters() ? " characters" : " tokens";
  if (n == 0) throw UsageError("--prompt: expected at least one character, found an empty string");
  if (n > context)
    throw UsageError("--prompt: expected at most the model's context of " + std::to_string(context) + unit +
                     ", found " + std::to_string(n) + (hint.empty() ? "" : "; " + hint));
}

}  // namespace qkv::cli
