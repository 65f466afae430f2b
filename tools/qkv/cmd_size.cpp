// qkv size: what a transformer costs (parameters, FLOPs per token, KV cache)
// for the presets of the lesson's table or any shape given by options.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "commands.h"
#include "qkv/model.h"
#include "support/model_size.h"

namespace qkv::cli {
namespace {

struct SizeArgs {
  std::vector<std::string> presets;
  std::string model_dir;
  std::string arch = "gpt";
  int64_t layers = 0, embd = 0, heads = 0, kv_heads = 0, vocab = 0, context = 0, ffn = 0;
  int64_t batch = 1;
  std::string dtype = "f32";
  bool json = false, no_bias = false;
  // Whether an option was given at all: 0 is a value to refuse, not "unset".
  const CLI::App* cmd = nullptr;
  bool given(const char* opt) const { return cmd->count(opt) > 0; }
};

// 124439808 -> "124.4M"; 8030261248 -> "8.03B".
std::string count_str(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

std::string bytes_str(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

// The shapes asked for: named presets, one custom shape, or all presets.
std::vector<ModelShape> shapes_from(const SizeArgs& a) {
  bool custom = a.no_bias;
  for (const char* opt : {"--layers", "--embd", "--heads", "--kv-heads", "--vocab", "--ffn"})
    custom = custom || a.given(opt);
  if (custom && !a.presets.empty())
    throw UsageError("give preset names or --layers/--embd/--heads/--vocab, not both");
  if (!custom && a.given("--arch"))
    throw UsageError("--arch: sets the block layout of a custom shape (--layers, --embd, --heads, "
                     "--vocab); a preset has its own");
  std::vector<ModelShape> out;
  if (a.given("--model")) {
    if (custom || !a.presets.empty() || a.given("--arch"))
      throw UsageError("--model: measures that folder's model; give it without presets or shape options");
    if (a.model_dir.empty()) throw UsageError("--model: expected a model folder, found an empty path");
    const GPTConfig cfg = Model::load(a.model_dir).config();
    // A learned position table has no row past its last: such a model
    // cannot attend to more tokens than it has positions.
    if (a.given("--context") && a.context > cfg.context && !cfg.rope)
      throw UsageError("--context: " + std::to_string(a.context) + " tokens is more than the model's " +
                       std::to_string(cfg.context) + " learned positions");
    ModelShape m = shape_of(cfg);
    m.name = std::filesystem::path(a.model_dir).lexically_normal().filename().string();
    if (m.name.empty()) m.name = std::filesystem::path(a.model_dir).lexically_normal().parent_path().filename().string();
    out.push_back(m);
    return out;
  }
  if (custom) {
    ModelShape m;
    m.name = "custom";
    const auto arch = parse_arch(a.arch);
    if (!arch) throw UsageError("--arch: expected gpt, bert or llama, found '" + a.arch + "'");
    m.arch = *arch;
    auto need = [](int64_t v, const char* opt) {
      if (v < 1) throw UsageError(std::string(opt) + ": required for a custom shape, a count >= 1");
      return v;
    };
    m.layers = need(a.layers, "--layers");
    m.embd = need(a.embd, "--embd");
    m.heads = need(a.heads, "--heads");
    m.kv_heads = a.given("--kv-heads") ? need(a.kv_heads, "--kv-heads") : m.heads;
    m.vocab = need(a.vocab, "--vocab");
    m.context = a.given("--context") ? a.context : 1024;  // the position table's length
    m.ffn = a.ffn;
    m.bias = m.arch != Arch::llama && !a.no_bias;
    m.learned_positions = m.arch != Arch::llama;
    try {
      m.validate();
    } catch (const Error& e) {
      throw UsageError(e.what());  // every value came from an option
    }
    out.push_back(m);
    return out;
  }
  if (a.presets.empty()) return model_presets();
  for (const std::string& name : a.presets) {
    auto m = find_preset(name);
    if (!m) {
      std::string names;
      for (const ModelShape& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
      throw UsageError("unknown preset '" + name + "': expected one of " + names);
    }
    out.push_back(*m);
  }
  return out;
}

int run_size(const SizeArgs& a) {
  if (a.dtype != "f32" && a.dtype != "bf16")
    throw UsageError("--dtype: expected f32 or bf16, found '" + a.dtype + "'");
  if (a.batch < 1) throw UsageError("--batch: expected a count >= 1, found " + std::to_string(a.batch));
  if (a.given("--context") && a.context < 1)
    throw UsageError("--context: expected a count >= 1, found " + std::to_string(a.context));
  const double elem = a.dtype == "f32" ? 4.0 : 2.0;
  const std::vector<ModelShape> shapes = shapes_from(a);

  nlohmann::json rows = nlohmann::json::array();
  for (const ModelShape& m : shapes) {
    // --context sets the tokens attended to and cached, not the model.
    const int64_t context = a.given("--context") ? a.context : m.context;
    const ModelSize s = model_size(m, context);
    const double ctx = static_cast<double>(context) * static_cast<double>(a.batch);
    rows.push_back({{"model", m.name}, {"arch", arch_name(m.arch)}, {"layers", m.layers},
                    {"d_model", m.embd}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                    {"d_head", m.head_dim()}, {"ffn", m.ffn_width()}, {"vocab", m.vocab},
                    {"context", context}, {"batch", a.batch}, {"dtype", a.dtype},
                    {"params", s.params}, {"embedding_params", s.embedding_params},
                    {"gflops_per_token", s.flops_per_token / 1e9},
                    {"kv_bytes_per_token", s.kv_elements_per_token * elem},
                    {"kv_bytes", s.kv_elements_per_token * elem * ctx},
                    {"kv_bytes_mha", s.kv_elements_per_token_mha * elem * ctx}});
  }
  if (a.json) {
    std::cout << rows.dump(2) << "\n";
    return 0;
  }
  std::printf("%-11s %6s %5s %6s %6s %9s %12s %11s %11s  %s\n", "model", "layers", "heads",
              "d_head", "params", "GFLOP/tok", "KV per token", "KV cache", "if MHA", "(KV at context x batch)");
  for (const auto& r : rows) {
    const double kv = r["kv_bytes"], mha = r["kv_bytes_mha"];
    const std::string heads = std::to_string(r["heads"].get<int64_t>()) + "/" +
                              std::to_string(r["kv_heads"].get<int64_t>());
    std::printf("%-11s %6lld %5s %6lld %6s %9.3g %12s %11s %11s  %lld x %lld, %s\n",
                r["model"].get<std::string>().c_str(), static_cast<long long>(r["layers"]),
                heads.c_str(), static_cast<long long>(r["d_head"]),
                count_str(r["params"].get<double>()).c_str(), r["gflops_per_token"].get<double>(),
                bytes_str(r["kv_bytes_per_token"]).c_str(), bytes_str(kv).c_str(),
                mha > kv ? bytes_str(mha).c_str() : "same", static_cast<long long>(r["context"]),
                static_cast<long long>(a.batch), a.dtype.c_str());
  }
  std::printf("heads = query/key-value heads; \"if MHA\": the cache with one key/value head per "
              "query head (GQA saves the difference).\n");
  return 0;
}

}  // namespace

Runner add_size(CLI::App& app) {
  auto a = std::make_shared<SizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "size",
      "What a transformer costs: parameters, FLOPs per token and KV-cache bytes, for the "
      "presets bert-base, gpt2, llama3-8b, llama3-70b or any shape (--layers --embd --heads "
      "--vocab ...). FLOPs: one token's forward at a full context (a multiply-add = 2).");
  cmd->add_option("preset", a->presets, "preset names (default: all of them)");
  cmd->add_option("--model", a->model_dir,
                  "a model folder (qkv's own, or a Hugging Face encoder): its shape, read from config.json");
  cmd->add_option("--arch", a->arch, "block layout of a custom shape: gpt, bert or llama")
      ->capture_default_str();
  cmd->add_option("--layers", a->layers, "transformer blocks");
  cmd->add_option("--embd", a->embd, "model width d_model");
  cmd->add_option("--heads", a->heads, "query heads");
  cmd->add_option("--kv-heads", a->kv_heads, "key/value heads (GQA; default: --heads)");
  cmd->add_option("--vocab", a->vocab, "vocabulary size");
  cmd->add_option("--ffn", a->ffn, "MLP width (default 4 x --embd)");
  cmd->add_option("--context", a->context,
                  "tokens in context for FLOPs and the KV cache (default: the preset's; 1024 custom)");
  cmd->add_option("--batch", a->batch, "sequences in the KV cache")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "KV-cache element type: f32 or bf16")->capture_default_str();
  cmd->add_flag("--no-bias", a->no_bias,
                "a custom gpt/bert shape without Linear and LayerNorm biases (qkv's and "
                "nanoGPT's default)");
  cmd->add_flag("--json", a->json, "a JSON array, one object per model, nothing else on stdout");
  // Whole numbers here; their ranges are checked with the shape.
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();
  check_counts<int64_t>(cmd, {{"--layers", kAny, "a count >= 1"}, {"--embd", kAny, "a count >= 1"},
                              {"--heads", kAny, "a count >= 1"}, {"--kv-heads", kAny, "a count >= 1 dividing --heads"},
                              {"--vocab", kAny, "a count >= 1"}, {"--ffn", kAny, "a count >= 1"},
                              {"--context", kAny, "a count >= 1"}, {"--batch", kAny, "a count >= 1"}});
  a->cmd = cmd;
  return [a] { return run_size(*a); };
}

}  // namespace qkv::cli
