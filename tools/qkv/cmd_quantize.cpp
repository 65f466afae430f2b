// qkv quantize: a model folder (or a GGUF file) written as a quantized GGUF
// file, with the per-tensor types llama-quantize chooses, for qkv and
// llama.cpp alike.
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>

#include <unistd.h>

#include "cli_common.h"
#include "commands.h"
#include "model_threads.h"
#include "qkv/quantize.h"
#include "qkv/runtime.h"

namespace qkv::cli {
namespace {

struct QuantizeArgs {
  std::string model, out, type;
  std::optional<int> threads;
  bool quiet = false;
};

int run_quantize(const QuantizeArgs& a) {
  QuantizeOptions options;
  try {
    options.mix = quant_mix_from_name(a.type);
  } catch (const Error& e) {
    throw UsageError(std::string("--type: ") + e.what());
  }
  const ThreadScope threads(model_threads(a.threads));
  // On a terminal one line, redrawn; in a log, a line a tensor (as llama-quantize writes).
  const bool tty = isatty(STDERR_FILENO);
  if (!a.quiet)
    options.progress = [tty](const std::string& name, WeightType type, int64_t done, int64_t total) {
      const auto i = static_cast<long long>(done + 1), n = static_cast<long long>(total);
      if (tty) std::fprintf(stderr, "\r[%lld/%lld] %-32s %-5s", i, n, name.c_str(), weight_type_info(type).name);
      else std::fprintf(stderr, "[%lld/%lld] %s %s\n", i, n, name.c_str(), weight_type_info(type).name);
      std::fflush(stderr);
    };
  const std::vector<QuantizedTensor> tensors = quantize_model(a.model, a.out, options);
  if (!a.quiet && tty) std::fprintf(stderr, "\n");
  std::map<std::string, int> by_type;
  double weights = 0;
  for (const QuantizedTensor& t : tensors) {
    ++by_type[weight_type_info(t.type).name];
    double n = 1;
    for (const int64_t d : t.ne) n *= static_cast<double>(d);
    weights += n;
  }
  const auto bytes = static_cast<double>(std::filesystem::file_size(a.out));
  std::cout << "wrote " << a.out << ": " << quant_mix_name(options.mix) << ", " << tensors.size() << " tensors (";
  const char* sep = "";
  for (const auto& [name, count] : by_type) {
    std::cout << sep << count << " " << name;
    sep = ", ";
  }
  std::cout << "), " << std::fixed << std::setprecision(1) << bytes / 1e6 << " MB, " << std::setprecision(2)
            << 8 * bytes / weights << " bits a weight\n";
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Write a model as a quantized GGUF file (llama.cpp's format) that qkv and llama.cpp run: a Hugging Face "
      "GPT-2 or Llama-family folder (float32 or bf16), or a GGUF file to quantize again. Each tensor gets the "
      "type llama-quantize would give it; norms and biases stay float32.");
  cmd->add_option("--model", a->model, "a Hugging Face GPT-2/Llama/Mistral folder, or a .gguf file")->required();
  cmd->add_option("-o,--out", a->out, "the GGUF file to write (replaced atomically)")->required();
  cmd->add_option("--type", a->type,
                  "q8_0 (8.5 bits a weight), q4_0 (4.5), q4_k_m (about 4.9: Q4_K, some tensors Q6_K), "
                  "q5_k_m (about 5.7), or q6_k (6.56)")
      ->required();
  cmd->add_flag("-q,--quiet", a->quiet, "no progress on stderr");
  add_model_threads(cmd, a->threads);
  path_options(cmd, {.read_dirs = {"--model"}, .writes = {"--out"}});
  return [a] { return run_quantize(*a); };
}

}  // namespace qkv::cli
