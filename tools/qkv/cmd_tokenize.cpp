// qkv tokenize: the ids (or token strings) a BERT-family model folder's
// tokenizer gives each line of a text, as Hugging Face's `tokenizers` gives
// them: to check a folder's tokenizer, or to see what an encoder will read.
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "qkv/error.h"
#include "qkv/wordpiece.h"

namespace qkv::cli {
namespace {

struct TokenizeArgs {
  std::string model_dir, input;
  bool tokens = false;
  int64_t max_length = 0;
};

int run_tokenize(const TokenizeArgs& a) {
  const WordPieceTokenizer tok = WordPieceTokenizer::from_folder(a.model_dir);
  try {
    tok.encode("", a.max_length);  // refuses a limit below the special tokens
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
      "The token ids a BERT-family model folder's tokenizer (tokenizer.json, else vocab.txt) gives each line "
      "of a text, one output line per input line: [CLS] word pieces [SEP], as Hugging Face's tokenizers "
      "gives them.");
  cmd->add_option("--model", a->model_dir, "a Hugging Face model folder with tokenizer.json or vocab.txt")
      ->required();
  cmd->add_option("--input", a->input, "the text, UTF-8, one sequence per line (\"-\": standard input)")
      ->required();
  cmd->add_flag("--tokens", a->tokens, "print token strings (\"[CLS]\", \"##ing\") instead of ids");
  cmd->add_option("--max-length", a->max_length,
                  "keep at most N ids per line, special tokens included (0: no limit; tokenizer.json's "
                  "truncation setting is not applied)");
  check_integers<int64_t>(cmd, {"--max-length"});
  cmd->get_option("--max-length")->check(CLI::NonNegativeNumber);
  return [a] { return run_tokenize(*a); };
}

}  // namespace qkv::cli
