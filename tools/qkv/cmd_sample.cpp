// qkv sample: generate text from a model `qkv train` wrote.
#include <iostream>
#include <optional>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "field_flags.h"
#include "model_prompt.h"
#include "qkv/model.h"

namespace qkv::cli {
namespace {

// SampleOptions' fields as the command's flags, in its messages.
const FieldFlags kSampleFlags = {{"tokens", "--tokens"}, {"temperature", "--temperature"},
                                 {"top_p", "--top-p"}, {"top_k", "--top-k"}, {"dtype", "--dtype"},
                                 {"kv_dtype", "--kv-dtype"}};

struct SampleArgs {
  std::string model_dir;
  SampleOptions o;
  bool no_cache = false;
  int threads = 1;
  std::string dtype = "auto";
  std::string kv_dtype = "auto";
};

// "auto" stays unset (the library's default); "float32", "bf16" or "bfloat16".
std::optional<DType> dtype_flag(const std::string& s) {
  if (s == "auto") return std::nullopt;
  return s == "float32" ? DType::f32 : DType::bf16;
}

int run_sample(SampleArgs& a) {
  as_usage(kSampleFlags, [&] { a.o.validate(); });
  check_threads("--threads", a.threads);
  try {
    if (!a.o.prompt.empty()) CharTokenizer::from_text(a.o.prompt);  // only to check its UTF-8
  } catch (const Error& e) {
    throw UsageError(std::string("--prompt: ") + e.what());
  }
  a.o.use_cache = !a.no_cache;
  a.o.dtype = dtype_flag(a.dtype);
  a.o.kv_dtype = dtype_flag(a.kv_dtype);
  Model m = Model::load(a.model_dir);
  refuse_encoder(m, "generated text");
  // The weights are in memory now; the KV cache, keys and values for the
  // whole context of every layer, is what generation still allocates.
  const GPTConfig& c = m.config();
  const DType kv = a.o.kv_dtype.value_or(a.o.dtype.value_or(m.weights_dtype()));
  const double cache = 2.0 * static_cast<double>(dtype_size(kv)) * static_cast<double>(c.layers) * static_cast<double>(c.kv_heads) *
                       static_cast<double>(c.context) * static_cast<double>(c.head_dim());
  const std::string refused = memory_shortfall(
      "'" + a.model_dir + "/config.json': context " + std::to_string(c.context) + ", layers " +
          std::to_string(c.layers) + ": the KV cache",
      cache);
  if (!refused.empty()) throw Error(refused);
  m.set_threads(a.threads);
  // Refuses invalid UTF-8 as a usage error; reports unseen characters once.
  encode_model_prompt("qkv sample", m, a.o.prompt);
  std::cout << a.o.prompt << std::flush;
  m.generate(a.o, [](const std::string& piece) {
    std::cout << piece << std::flush;
    check_stdout();
  });
  std::cout << "\n";
  return 0;
}

}  // namespace

Runner add_sample(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sample", "Generate text from a language model (trained by `qkv train`, or a Hugging Face GPT-2 "
      "or Llama folder), streaming it as it comes.");
  cmd->add_option("--model", a->model_dir, "the --out directory of qkv train, or a GPT-2 or Llama folder")
      ->required();
  cmd->add_option("--prompt", a->o.prompt, "text to continue (default: a newline)");
  cmd->add_option("--tokens", a->o.tokens, "tokens to generate (characters for qkv's own models)")->capture_default_str();
  cmd->add_option("--temperature", a->o.temperature,
                  "sharpen (< 1) or flatten (> 1) the choice; 0 = greedy: always the likeliest")
      ->capture_default_str();
  cmd->add_option("--top-k", a->o.top_k, "choose among the k likeliest only (0 = all)")->capture_default_str();
  cmd->add_option("--top-p", a->o.top_p,
                  "nucleus: choose among the fewest likeliest tokens whose probability reaches P "
                  "(0 < P <= 1; 1 = all)")
      ->capture_default_str();
  cmd->add_option("--seed", a->o.seed, "seed of the draws")->capture_default_str();
  cmd->add_option("--threads", a->threads, "threads")->capture_default_str();
  cmd->add_option("--dtype", a->dtype,
                  "the layers' products: float32, or bf16 (also spelt bfloat16) with float32 sums; "
                  "auto: the weights' dtype (bf16 for a folder of BF16 weights, which are read as they are)")
      ->check(CLI::IsMember({"auto", "float32", "bf16", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  "the KV cache's keys and values: float32, or bf16 (half the memory); "
                  "auto: bf16 when the products run in bf16, else float32")
      ->check(CLI::IsMember({"auto", "float32", "bf16", "bfloat16"}))
      ->capture_default_str();
  cmd->add_flag("--no-cache", a->no_cache,
                "recompute the whole context at every step instead of using the KV cache "
                "(same tokens, slower; for checking)");
  check_integers<int64_t>(cmd, {"--tokens", "--top-k"});
  check_integers<uint64_t>(cmd, {"--seed"});
  check_integers<int>(cmd, {"--threads"});
  check_paths(cmd, {"--model"});
  return [a] { return run_sample(*a); };
}

}  // namespace qkv::cli
