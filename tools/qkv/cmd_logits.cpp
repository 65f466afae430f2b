// qkv logits: the next-token logits a trained model gives at every position
// of a prompt, as a NumPy file, to check or study what `qkv sample` draws
// from (greedy sampling picks each row's argmax).
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "model_prompt.h"
#include "model_threads.h"
#include "qkv/model.h"

namespace qkv::cli {
namespace {

struct LogitsArgs {
  std::string model_dir, prompt, out, quantize = "none";
  std::optional<int> threads;
};

int run_logits(const LogitsArgs& a) {
  const int threads = model_threads(a.threads);
  Model m = load_model_arg("qkv logits", a.model_dir, a.quantize);
  refuse_encoder(m, "next-token logits");
  m.set_threads(threads);
  const Prompt p = encode_model_prompt("qkv logits", m, a.prompt);
  check_prompt_fits(p, m);
  // Row t is the model's prediction for the token after prompt[0..t]: one
  // pass over the prompt gives every position, as training sees them.
  const Tensor logits = m.logits(p.ids);
  save_npy_arg("--out", a.out, logits);
  std::cout << "wrote next-token logits " << shape_str(logits.shape()) << " float32 (row t follows "
            << "the prompt's first t + 1 " << (m.reads_characters() ? "characters" : "tokens");
  if (m.reads_characters() && m.tokenizer().has_unknown())
    std::cout << "; the last id, " << m.tokenizer().unknown_id() << ", is the unknown token";
  std::cout << ") to " << a.out << "\n";
  return 0;
}

}  // namespace

Runner add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "logits",
      "The next-token logits of a language model (trained by `qkv train`, or a Hugging Face GPT-2 "
      "folder) at every position of a prompt, as a [T, vocab] float32 .npy file.");
  cmd->add_option("--model", a->model_dir, "the --out directory of qkv train, or a GPT-2 folder")->required();
  cmd->add_option("--prompt", a->prompt, "the text, at most the model's context in tokens")
      ->required();
  cmd->add_option("-o,--out", a->out, "output .npy file: logits [T, vocab] float32")->required();
  add_model_threads(cmd, a->threads);
  add_quantize_flag(cmd, a->quantize);
  path_options(cmd, {.read_dirs = {"--model"}, .writes = {"--out"}});
  return [a] { return run_logits(*a); };
}

}  // namespace qkv::cli
