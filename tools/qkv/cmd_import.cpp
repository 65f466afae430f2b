// qkv import --from nanogpt: a nanoGPT model (its state_dict saved as
// safetensors) as a qkv model directory, which `qkv sample`, `qkv logits`
// and `qkv explain --model` then read.
//
// nanoGPT's GPT maps onto qkv's GPTConfig as
//   transformer.wte.weight [V, C]      vocab V, embd C
//   transformer.wpe.weight [T, C]      context T (learned positions, no RoPE)
//   transformer.h.<l>.*                layers: how many h.<l>.ln_1.weight there are
//   transformer.ln_f.bias present      bias on (nanoGPT's bias=True)
//   lm_head.weight                     must equal wte (tied, as qkv's head is);
//                                      one of the two may be absent (save_model)
//   n_head                             not in any shape: --heads
// with kv_heads = heads, the exact GELU (nn.GELU()). The vocabulary is the
// characters of --vocab-text, sorted, exactly nanoGPT's `sorted(set(text))`,
// and has no unknown id (vocab.json's "unknown" is null).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "cli_common.h"
#include "commands.h"
#include "field_flags.h"
#include "qkv/checkpoint.h"
#include "qkv/model.h"
#include "qkv/safetensors.h"

namespace qkv::cli {
namespace {

// A checkpoint of another layout (a Hugging Face BERT's, say) is named as
// such from its header, before its tensors' dtypes (I64 position ids) or
// missing names could give a stranger error.
void refuse_other_checkpoints(const std::string& path) {
  const std::vector<SafetensorsEntry> entries = safetensors_entries(path);
  for (const SafetensorsEntry& e : entries)
    if (e.name == "transformer.wte.weight" || e.name == "lm_head.weight") return;
  std::string held = entries.empty() ? "no tensors" : entries[0].name;
  if (entries.size() > 1) held += " and " + std::to_string(entries.size() - 1) + " more";
  throw Error("'" + path + "' is not a nanoGPT checkpoint: it has no transformer.wte.weight (it holds " +
              held + "); a Hugging Face model folder is read as it is by --model");
}

struct ImportArgs {
  std::string from, weights, vocab_text, out;
  int64_t heads = 0;
  bool force = false;
};

int run_import(const ImportArgs& a) {
  if (a.from != "nanogpt")
    throw UsageError("--from: expected \"nanogpt\" (the only format qkv imports), found \"" + a.from + "\"");
  if (a.heads < 1) throw UsageError("--heads: expected nanoGPT's n_head, a count >= 1, found " + std::to_string(a.heads));

  std::error_code ec;
  if (std::filesystem::is_directory(a.vocab_text, ec))
    throw Error("--vocab-text: '" + a.vocab_text + "' is a directory; expected the text file "
                "nanoGPT's vocabulary was built from");
  std::ifstream in(a.vocab_text, std::ios::binary);
  if (!in) throw Error("--vocab-text: cannot open '" + a.vocab_text + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  const CharTokenizer tok = [&] {
    try {
      return CharTokenizer::from_text(text.str(), /*unknown_token=*/false);
    } catch (const Error& e) {
      throw Error("--vocab-text: '" + a.vocab_text + "': " + e.what());
    }
  }();

  const std::string wpath = a.weights;
  std::map<std::string, Tensor> tensors = [&] {
    try {
      refuse_other_checkpoints(wpath);
      return read_safetensors(wpath);
    } catch (const Error& e) {
      throw Error(std::string("--weights: ") + e.what());
    }
  }();
  // safetensors.torch.save_model keeps one name of a shared (tied) tensor:
  // the other is the same weight.
  if (tensors.count("lm_head.weight") && !tensors.count("transformer.wte.weight"))
    tensors.emplace("transformer.wte.weight", tensors.at("lm_head.weight"));
  if (tensors.count("transformer.wte.weight") && !tensors.count("lm_head.weight"))
    tensors.emplace("lm_head.weight", tensors.at("transformer.wte.weight"));
  const std::string pre = "--weights: '" + wpath + "': ";
  auto need = [&](const std::string& name) -> const Tensor& {
    const auto it = tensors.find(name);
    if (it == tensors.end()) throw Error(pre + "missing tensor '" + name + "' (nanoGPT's state_dict has it)");
    if (it->second.dtype() != DType::f32)
      throw Error(pre + "tensor '" + name + "' should be float32, found " + dtype_name(it->second.dtype()));
    return it->second;
  };
  const Tensor& wte = need("transformer.wte.weight");
  const Tensor& wpe = need("transformer.wpe.weight");
  if (wte.rank() != 2 || wpe.rank() != 2 || wpe.shape()[1] != wte.shape()[1])
    throw Error(pre + "expected transformer.wte.weight [vocab, embd] and transformer.wpe.weight "
                "[context, embd], found " + shape_str(wte.shape()) + " and " + shape_str(wpe.shape()));

  // Sizes read from the shapes: an empty one is the file's fault, named
  // here, not the config check's (which would blame --heads).
  for (const auto& [name, t, rows] : {std::tuple{"transformer.wte.weight", &wte, "token (vocab)"},
                                      std::tuple{"transformer.wpe.weight", &wpe, "position (context)"}})
    if (t->shape()[0] < 1 || t->shape()[1] < 1)
      throw Error(pre + "tensor '" + name + "' has shape " + shape_str(t->shape()) +
                  ": expected at least one " + rows + " row and one embedding column");

  GPTConfig cfg;
  cfg.vocab = wte.shape()[0];
  cfg.embd = wte.shape()[1];
  cfg.context = wpe.shape()[0];
  cfg.layers = 0;
  while (tensors.count("transformer.h." + std::to_string(cfg.layers) + ".ln_1.weight")) ++cfg.layers;
  if (cfg.layers == 0) need("transformer.h.0.ln_1.weight");  // throws, naming it
  cfg.heads = cfg.kv_heads = a.heads;
  cfg.rope = false;
  cfg.bias = tensors.count("transformer.ln_f.bias") > 0;
  cfg.gelu = nn::Gelu::exact;
  if (cfg.vocab != tok.vocab_size())
    throw Error(pre + "transformer.wte.weight has " + std::to_string(cfg.vocab) + " tokens, but '" +
                a.vocab_text + "' has " + std::to_string(tok.vocab_size()) +
                " distinct characters (nanoGPT's vocabulary is sorted(set(text)))");
  try {
    cfg.validate();
  } catch (const Error& e) {
    throw UsageError(std::string("--heads: ") + e.what());
  }

  Model model = [&] {
    try {
      return Model::from_tensors(cfg, tensors, tok, wpath);
    } catch (const Error& e) {
      throw Error(std::string("--weights: ") + e.what());
    }
  }();
  std::set<std::string> used;
  for (const ParamInfo& p : model.gpt().params()) used.insert(p.name);
  // qkv's logits are x · wteᵀ: the head must be tied, as nanoGPT ties it.
  const Tensor& head = need("lm_head.weight");
  if (head.shape() != wte.shape() ||
      !std::equal(wte.data<float>(), wte.data<float>() + wte.numel(), head.data<float>()))
    throw Error(pre + "lm_head.weight differs from transformer.wte.weight: qkv's output head is tied "
                "to the token embedding (as nanoGPT's is), an untied head cannot be imported");
  used.insert("lm_head.weight");
  for (const auto& [name, t] : tensors) {
    if (used.count(name)) continue;
    // nanoGPT without flash attention registers its causal mask as a buffer
    // "attn.bias" [1, 1, T, T]: not a weight, qkv's attention is causal anyway.
    const bool mask = name.size() > 10 && name.compare(name.size() - 10, 10, ".attn.bias") == 0 && t.rank() == 4;
    if (!mask)
      throw Error(pre + "unexpected tensor '" + name + "' (not in nanoGPT's GPT of " +
                  std::to_string(cfg.layers) + " layers, bias " + (cfg.bias ? "on" : "off") + ")");
  }

  namespace fs = std::filesystem;
  if (fs::exists(a.out + "/model.safetensors", ec) && !a.force)
    throw UsageError("--out: '" + a.out + "' already holds a model (model.safetensors); --force replaces it");
  if (!a.force)
    in_flags({{"out_dir", "--out"}, {"force", "--force"}},
             [&] { refuse_foreign_directory(a.out, {a.weights, a.vocab_text}); });
  fs::create_directories(a.out, ec);
  if (ec) throw Error("--out: cannot create '" + a.out + "': " + ec.message());
  model.save(a.out);
  // A training run's resume point left in --out belongs to another model: a
  // later `qkv train --resume` would silently bring that model back.
  fs::remove(a.out + "/train_state.safetensors", ec);
  if (ec) throw Error("--out: cannot remove the old training state in '" + a.out + "': " + ec.message());
  std::cout << "imported nanoGPT model: " << cfg.layers << " layers, " << cfg.heads << " heads, embd "
            << cfg.embd << ", context " << cfg.context << ", vocab " << cfg.vocab
            << " (no unknown token), bias " << (cfg.bias ? "on" : "off") << ", GELU exact -> " << a.out
            << "\n";
  return 0;
}

}  // namespace

Runner add_import(CLI::App& app) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "import", "A model from another program as a qkv model directory (for sample, logits, explain).");
  cmd->add_option("--from", a->from, "the format: nanogpt (its state_dict as safetensors)")->required();
  cmd->add_option("--weights", a->weights, "the state_dict in a .safetensors file (float32)")->required();
  cmd->add_option("--vocab-text", a->vocab_text,
                  "the training text: its characters, sorted, are the vocabulary (nanoGPT's)")
      ->required();
  cmd->add_option("--heads", a->heads, "attention heads (nanoGPT's n_head; no shape holds it)")->required();
  cmd->add_option("-o,--out", a->out, "output model directory")->required();
  cmd->add_flag("--force", a->force,
                "write into --out even where it holds a model, or files qkv did not write (those of "
                "the names import writes are replaced)");
  check_counts<int64_t>(cmd, {{"--heads", std::numeric_limits<int64_t>::min(), "nanoGPT's n_head, a count >= 1"}});
  // The files import writes (or removes) in --out: an input may live there,
  // but must not be one of them.
  path_options(cmd, {.reads = {"--weights", "--vocab-text"},
                     .write_dirs = {{"--out", {"model.safetensors", "config.json", "vocab.json",
                                               "train_state.safetensors"}}}});
  return [a] { return run_import(*a); };
}

}  // namespace qkv::cli
