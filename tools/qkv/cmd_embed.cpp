// qkv embed: one vector per line of a text from a BERT-family encoder
// folder, as sentence-transformers' encode() gives them (pooled, and
// normalised when the folder says so), into a .npy file.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli_common.h"
#include "model_threads.h"
#include "commands.h"
#include "field_flags.h"
#include "model_prompt.h"
#include "qkv/model.h"

namespace qkv::cli {
namespace {

struct EmbedArgs {
  std::string model_dir, input, out, dtype = "float32";
  int64_t batch = 32, max_length = 0;
  std::optional<int> threads;
};

// "\r[=====>    ] 1200/5000 texts" on a terminal's stderr, redrawn per batch.
void draw_progress(int64_t done, int64_t total) {
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(kWidth * done / total);
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - fill - 1), ' ');
  std::fprintf(stderr, "\r[%s] %lld/%lld texts", bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total));
  if (done == total) std::fputc('\n', stderr);
}

const FieldFlags kEmbedFlags = {{"batch", "--batch"}, {"max_length", "--max-length"}, {"dtype", "--dtype"}};

int run_embed(const EmbedArgs& a) {
  const int threads = model_threads(a.threads);
  EmbedOptions o;
  o.batch = a.batch;
  o.max_length = a.max_length;
  o.dtype = a.dtype == "float32" ? DType::f32 : DType::bf16;
  as_usage(kEmbedFlags, [&] { o.validate(); });
  const std::vector<std::string> texts = split_lines(read_text_arg("--input", a.input));
  Model m = load_model_arg("qkv embed", a.model_dir);
  if (!m.is_encoder())
    throw UsageError("--model: '" + a.model_dir + "' is a " + m.architecture() +
                     " language model; qkv embed needs an encoder (a BERT-family folder)");
  const int64_t limit = as_usage(kEmbedFlags, [&] { return m.embed_length(o); });
  m.set_threads(threads);
  if (texts.empty()) throw Error("--input: no lines to embed");
  // A bar only where someone watches, and only when there are several batches.
  if (isatty(STDERR_FILENO) && static_cast<int64_t>(texts.size()) > 4 * a.batch) o.progress = draw_progress;
  // Tokenized here rather than by embed(), so an error names the line.
  std::vector<std::vector<int32_t>> ids(texts.size());
  int64_t cut = 0;
  for (size_t n = 0; n < texts.size(); ++n) {
    bool truncated = false;
    try {
      ids[n] = m.tokenize(texts[n], limit, &truncated);
    } catch (const Error& e) {
      throw Error("--input line " + std::to_string(n + 1) + ": " + e.what());
    }
    cut += truncated;
  }
  const Tensor e = m.embed_ids(ids, o);
  if (cut > 0)
    std::cerr << "qkv embed: " << cut << " of " << texts.size() << " lines were cut to "
              << limit << " tokens\n";
  save_npy_arg("--out", a.out, e);
  std::cout << "wrote " << texts.size() << " embeddings " << shape_str(e.shape()) << " float32 ("
            << (m.pooling().mode == Pooling::Mode::cls ? "[CLS] token" : "pooled")
            << (m.pooling().normalize ? ", unit length" : "") << ") to " << a.out << "\n";
  return 0;
}

}  // namespace

Runner add_embed(CLI::App& app) {
  auto a = std::make_shared<EmbedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "embed",
      "One vector per line of a text from a BERT-family encoder folder (config.json, model.safetensors, "
      "tokenizer.json; sentence-transformers' modules.json for its pooling), as sentence-transformers' "
      "encode() gives them, into a [lines, hidden] float32 .npy file.");
  cmd->add_option("--model", a->model_dir, "a Hugging Face encoder folder")->required();
  cmd->add_option("--input", a->input, "the texts, UTF-8, one per line (\"-\": standard input)")->required();
  cmd->add_option("-o,--out", a->out, "output .npy file: embeddings [lines, hidden] float32")->required();
  cmd->add_option("--batch", a->batch, "texts per forward pass")->capture_default_str();
  cmd->add_option("--max-length", a->max_length,
                  "cut each text to N tokens, [CLS] and [SEP] included (0: the folder's max_seq_length; at most the model's positions)")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "float32, or bf16 (also spelt bfloat16): the layers' products in bf16")
      ->check(CLI::IsMember({"float32", "bf16", "bfloat16"}))
      ->capture_default_str();
  add_model_threads(cmd, a->threads);
  check_counts<int64_t>(cmd, {{"--batch", 1, "a number of texts >= 1"},
                              {"--max-length", 0,
                               "0 (the model's maximum) or a number of tokens >= 2 ([CLS] and [SEP])"}});
  path_options(cmd, {.reads = {"--input"}, .read_dirs = {"--model"}, .writes = {"--out"}});
  return [a] { return run_embed(*a); };
}

}  // namespace qkv::cli
