// qkv export --to nanogpt: a qkv model as a state_dict nanoGPT's GPT loads
// with load_state_dict(strict=True): qkv's tensors by their (nanoGPT's) names
// plus lm_head.weight, a copy of transformer.wte.weight (the head is tied; a
// state_dict lists it under both names). model.safetensors itself stays
// without it, so qkv's checkpoints hold each weight once.
//
// nanoGPT's GPT has learned positions, as many K/V heads as query heads and
// the exact GELU: a RoPE or GQA model has no nanoGPT form and is refused; a
// tanh-GELU model (trained before the choice existed) loads, but computes
// slightly different logits in nanoGPT, which a warning says.
#include <iostream>

#include "cli_common.h"
#include "model_prompt.h"
#include "commands.h"
#include "qkv/model.h"
#include "qkv/safetensors.h"

namespace qkv::cli {
namespace {

struct ExportArgs {
  std::string to, model_dir, out;
};

int run_export(const ExportArgs& a) {
  if (a.to != "nanogpt")
    throw UsageError("--to: expected \"nanogpt\" (the only format qkv exports), found \"" + a.to + "\"");
  const Model m = load_model_arg("qkv export", a.model_dir);
  refuse_encoder(m, "a nanoGPT checkpoint");
  const GPTConfig& c = m.config();
  const std::string cfg = "'" + a.model_dir + "/config.json': ";
  if (c.rope)
    throw Error(cfg + "the model uses RoPE; nanoGPT's GPT has learned positions (wpe) only");
  if (c.kv_heads != c.heads)
    throw Error(cfg + "the model has " + std::to_string(c.kv_heads) + " K/V heads for " +
                std::to_string(c.heads) + " query heads (GQA); nanoGPT's GPT has one per query head");
  if (c.gelu == nn::Gelu::tanh)
    std::cerr << "qkv export: warning: the model uses the tanh GELU; nanoGPT's is exact (erf), so its "
                 "logits will differ slightly from qkv's\n";
  const std::vector<std::pair<std::string, Tensor>> weights = m.named_weights();
  std::vector<std::pair<std::string, const Tensor*>> named;
  for (const auto& [name, t] : weights) {
    named.emplace_back(name, &t);
    if (name == "transformer.wte.weight") named.emplace_back("lm_head.weight", &t);
  }
  try {
    write_safetensors(a.out, named, {{"format", "pt"}});
  } catch (const Error& e) {
    throw Error(std::string("--out: ") + e.what());
  }
  std::cout << "wrote nanoGPT state_dict (" << named.size() << " tensors; GPTConfig(n_layer=" << c.layers
            << ", n_head=" << c.heads << ", n_embd=" << c.embd << ", block_size=" << c.context
            << ", vocab_size=" << c.vocab << ", bias=" << (c.bias ? "True" : "False") << ")) to " << a.out
            << "\n";
  return 0;
}

}  // namespace

Runner add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export", "A qkv model in another program's form: nanoGPT's state_dict as safetensors.");
  cmd->add_option("--to", a->to, "the format: nanogpt (load_state_dict(strict=True) loads it)")->required();
  cmd->add_option("--model", a->model_dir, "the model directory (qkv train's --out, or qkv import's)")
      ->required();
  cmd->add_option("-o,--out", a->out, "output .safetensors file")->required();
  path_options(cmd, {.read_dirs = {"--model"}, .writes = {"--out"}});
  return [a] { return run_export(*a); };
}

}  // namespace qkv::cli
