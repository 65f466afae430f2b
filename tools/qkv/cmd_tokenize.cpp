// qkv tokenize: the ids (or token strings) a Hugging Face model folder's
// tokenizer gives each line of a text, as Hugging Face's `tokenizers` gives
// them: to check a folder's tokenizer, or to see what a model will read.
// WordPiece (BERT-family folders) or byte-level BPE (GPT-2), as the
// folder's tokenizer.json says; or the byte-level BPE tokenizer of a GGUF
// file's metadata.
#include <filesystem>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "qkv/bpe.h"
#include "qkv/error.h"
#include "qkv/gguf.h"
#include "qkv/wordpiece.h"

namespace qkv::cli {
namespace {

struct TokenizeArgs {
  std::string model_dir, input;
  bool tokens = false;
  int64_t max_length = 0;
};

// A folder's tokenizer as this command uses it: text to ids, cut to a
// length, and an id's token as the file spells it.
struct Tokenizer {
  std::function<std::vector<int32_t>(const std::string&, int64_t, bool*)> encode;
  std::function<std::string(int32_t)> token;
};

// tokenizer.json's model.type; "BPE" for GPT-2's vocab.json and merges.txt
// without one; else "" (a file the WordPiece reader will report on).
std::string model_type(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return std::filesystem::exists(dir + "/vocab.json", ec) && std::filesystem::exists(dir + "/merges.txt", ec)
               ? "BPE"
               : "";
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  const nlohmann::json j = nlohmann::json::parse(read_text_arg("--model", path), nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || !j["model"].contains("type") ||
      !j["model"]["type"].is_string())
    return "";
  return j["model"]["type"].get<std::string>();
}

Tokenizer folder_tokenizer(const std::string& dir) {
  std::error_code ec;
  const bool gguf = std::filesystem::is_regular_file(dir, ec);  // else a folder (or what WordPiece reports)
  if (gguf || model_type(dir) == "BPE") {
    auto bpe = std::make_shared<const BpeTokenizer>(gguf ? BpeTokenizer::from_gguf(GgufFile::open(dir))
                                                         : BpeTokenizer::from_folder(dir));
    return {[bpe](const std::string& text, int64_t max_length, bool* truncated) {
              return bpe->encode_with_specials(text, max_length, truncated);
            },
            [bpe](int32_t id) { return bpe->token(id); }};
  }
  auto wp = std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_folder(dir));
  return {[wp](const std::string& text, int64_t max_length, bool* truncated) {
            return wp->encode(text, max_length, truncated);
          },
          [wp](int32_t id) { return wp->token(id); }};
}

int run_tokenize(const TokenizeArgs& a) {
  const Tokenizer tok = folder_tokenizer(a.model_dir);
  try {
    bool cut = false;
    tok.encode("", a.max_length, &cut);  // refuses a limit below the special tokens
  } catch (const Error& e) {
    throw UsageError(std::string("--max-length: ") + e.what());
  }
  const std::vector<std::string> lines = split_lines(read_text_arg("--input", a.input));
  int64_t cut_lines = 0;
  std::string out;
  for (size_t n = 0; n < lines.size(); ++n) {
    bool truncated = false;
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(lines[n], a.max_length, &truncated);
    } catch (const Error& e) {
      throw Error("--input line " + std::to_string(n + 1) + ": " + e.what());
    }
    cut_lines += truncated;
    out.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      out += a.tokens ? tok.token(ids[i]) : std::to_string(ids[i]);
    }
    out += '\n';
    std::cout << out;
  }
  check_stdout();
  if (cut_lines > 0)
    std::cerr << "qkv tokenize: " << cut_lines << " of " << lines.size() << " lines were cut to --max-length "
              << a.max_length << " tokens\n";
  return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "The token ids a Hugging Face model folder's tokenizer (tokenizer.json: WordPiece or byte-level BPE; "
      "else vocab.txt) gives each line of a text, one output line per input line, as Hugging Face's "
      "tokenizers gives them ([CLS] word pieces [SEP] for a BERT-family folder).");
  cmd->add_option("--model", a->model_dir,
                  "a Hugging Face model folder with tokenizer.json or vocab.txt, or a GGUF file")
      ->required();
  cmd->add_option("--input", a->input, "the text, UTF-8, one sequence per line (\"-\": standard input)")
      ->required();
  cmd->add_flag("--tokens", a->tokens, "print token strings (\"[CLS]\", \"##ing\", \"Ġthe\") instead of ids");
  cmd->add_option("--max-length", a->max_length,
                  "keep at most N ids per line, special tokens included (0: no limit; tokenizer.json's "
                  "truncation setting is not applied)");
  check_counts<int64_t>(cmd, {{"--max-length", 0, "0 (no limit) or a number of tokens per line, special tokens included"}});
  return [a] { return run_tokenize(*a); };
}

}  // namespace qkv::cli
