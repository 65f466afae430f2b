// qkv sample: generate text from a model `qkv train` wrote.
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "field_flags.h"
#include "model_prompt.h"
#include "model_threads.h"
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
  std::optional<int> threads;
  std::string dtype = "auto";
  std::string kv_dtype = "auto";
  std::string quantize = "none";
};

// "auto" stays unset (the library's default); "float32", "bf16" or "bfloat16".
std::optional<DType> dtype_flag(const std::string& s) {
  if (s == "auto") return std::nullopt;
  return s == "float32" ? DType::f32 : DType::bf16;
}

int run_sample(SampleArgs& a) {
  as_usage(kSampleFlags, [&] { a.o.validate(); });
  const int threads = model_threads(a.threads);
  try {
    if (!a.o.prompt.empty()) CharTokenizer::from_text(a.o.prompt);  // only to check its UTF-8
  } catch (const Error& e) {
    throw UsageError(std::string("--prompt: ") + e.what());
  }
  a.o.use_cache = !a.no_cache;
  a.o.dtype = dtype_flag(a.dtype);
  a.o.kv_dtype = dtype_flag(a.kv_dtype);
  Model m = load_model_arg("qkv sample", a.model_dir, a.quantize);
  refuse_encoder(m, "generated text");
  // The weights are in memory now; the KV cache, keys and values for the
  // whole context of every layer, is what generation still allocates.
  const GPTConfig& c = m.config();
  const DType kv = a.o.kv_dtype.value_or(m.gpt().default_kv_dtype(a.o.dtype.value_or(m.weights_dtype())));
  const double cache = 2.0 * static_cast<double>(dtype_size(kv)) * static_cast<double>(c.layers) * static_cast<double>(c.kv_heads) *
                       static_cast<double>(c.context) * static_cast<double>(c.head_dim());
  std::error_code ec;  // a folder's config.json, or the GGUF file that holds the config
  const std::string config = std::filesystem::is_directory(a.model_dir, ec) ? a.model_dir + "/config.json" : a.model_dir;
  const std::string refused = memory_shortfall(
      "'" + config + "': context " + std::to_string(c.context) + ", layers " +
          std::to_string(c.layers) + ": the KV cache",
      cache);
  if (!refused.empty()) throw Error(refused);
  m.set_threads(threads);
  // Refuses invalid UTF-8 as a usage error; reports unseen characters once.
  const Prompt p = encode_model_prompt("qkv sample", m, a.o.prompt);
  // An empty prompt is fine: generation starts from "\n" or the beginning-of-text token.
  if (!a.o.sliding_window && !p.ids.empty())
    check_prompt_fits(p, m, "shorten it, or pass --sliding-window to read only its last " + std::to_string(c.context));
  std::cout << a.o.prompt << std::flush;
  const Generation g = m.generate(a.o, [](const std::string& piece) {
    std::cout << piece << std::flush;
    check_stdout();
  });
  std::cout << "\n";
  if (g.stop == StopReason::context) {
    const std::string unit = m.reads_characters() ? " characters" : " tokens";
    std::cout.flush();
    std::cerr << "qkv sample: stopped after " << g.ids.size() << " of " << a.o.tokens << unit
              << ": the model's context of " << c.context << unit << " is full (--sliding-window goes on, "
              << "reading only the last " << c.context << ")\n";
  }
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
  add_model_threads(cmd, a->threads);
  add_quantize_flag(cmd, a->quantize);
  cmd->add_option("--dtype", a->dtype,
                  "the layers' products: float32, or bf16 (also spelt bfloat16) with float32 sums; "
                  "auto: the weights' dtype (bf16 for a folder of BF16 weights, which are read as they are)")
      ->check(CLI::IsMember({"auto", "float32", "bf16", "bfloat16"}))
      ->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  "the KV cache's keys and values: float32, or bf16 (half the memory); "
                  "auto: bf16 when the products run in bf16 or the matrices are quantized, else float32")
      ->check(CLI::IsMember({"auto", "float32", "bf16", "bfloat16"}))
      ->capture_default_str();
  cmd->add_flag("--sliding-window", a->o.sliding_window,
                "when the text fills the model's context, go on reading only its last context tokens, "
                "their positions starting again at 0, as nanoGPT does (default: stop there and say so; "
                "a longer --prompt is refused)");
  cmd->add_flag("--special", a->o.special_tokens,
                "print special tokens, such as the end-of-text token at which generation stops "
                "(default: left out, as transformers' skip_special_tokens leaves them)");
  cmd->add_flag("--no-cache", a->no_cache,
                "recompute the whole context at every step instead of using the KV cache "
                "(same tokens, slower; for checking)");
  // Whole numbers here; their ranges are the sampler's checks.
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();
  check_counts<int64_t>(cmd, {{"--tokens", kAny, "a number of tokens >= 0"},
                              {"--top-k", kAny, "0 (all) or a number of likeliest tokens to choose among"}});
  check_integers<uint64_t>(cmd, {"--seed"});
  path_options(cmd, {.read_dirs = {"--model"}});
  return [a] { return run_sample(*a); };
}

}  // namespace qkv::cli
