#include "explain_model.h"

#include <algorithm>
#include <iostream>
#include <vector>

#include "cli_common.h"
#include "model_prompt.h"
#include "model_threads.h"
#include "qkv/model.h"
#include "support/attention_page.h"
#include "qkv/error.h"
#include "qkv/heatmap.h"

namespace qkv::cli {
namespace {

// The numbers 0..n-1, or only `one` after checking it names one of them.
std::vector<int64_t> select(const std::optional<int64_t>& one, int64_t n, const std::string& option,
                            const char* what) {
  if (one) {
    if (*one < 0 || *one >= n)
      throw UsageError(option + ": expected a " + what + " in [0, " + std::to_string(n - 1) +
                       "] (the model has " + std::to_string(n) + "), found " + std::to_string(*one));
    return {*one};
  }
  std::vector<int64_t> all;
  for (int64_t i = 0; i < n; ++i) all.push_back(i);
  return all;
}

}  // namespace

int explain_model(const ExplainModelArgs& a) {
  const int threads = model_threads(a.threads);
  Model m = load_model_arg("qkv explain", a.model_dir);
  m.set_threads(threads);
  const GPTConfig& cfg = m.config();
  const std::vector<int64_t> layers = select(a.layer, cfg.layers, "--layer", "layer");
  const std::vector<int64_t> heads = select(a.head, cfg.heads, "--head", "head");
  const Prompt p = encode_model_prompt("qkv explain", m, a.prompt);
  check_prompt_fits(p, m);
  const int64_t T = static_cast<int64_t>(p.ids.size());
  const Tensor maps = m.attention_maps(p.ids);  // [L, H, T, T]

  // The selected panels, [layers, heads, T, T]: what every view shows.
  const auto nl = static_cast<int64_t>(layers.size()), nh = static_cast<int64_t>(heads.size());
  Tensor shown(DType::f32, {nl, nh, T, T});
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < nh; ++j) {
      const float* from = maps.data<float>() + (layers[i] * cfg.heads + heads[j]) * T * T;
      std::copy(from, from + T * T, shown.data<float>() + (i * nh + j) * T * T);
    }
  const Tensor shown64 = shown.to(DType::f64);
  const std::vector<std::string>& labels = p.labels;

  std::cout << "model " << a.model_dir << ": " << cfg.layers << " layers x " << cfg.heads
            << " heads (head dim " << cfg.head_dim();
  if (cfg.kv_heads != cfg.heads) std::cout << ", " << cfg.kv_heads << " key/value heads";
  std::cout << "), context " << cfg.context << ", vocabulary " << cfg.vocab << ", "
            << (cfg.rope ? "RoPE" : "learned") << " positions"
            << (m.is_encoder() ? ", a " + m.architecture() + " encoder" : std::string()) << "\n"
            << "prompt: " << T << " tokens. Each row is a token reading (the query), each column a "
            << (cfg.causal ? "token it may attend to: itself and those before it (causal).\n"
                           : "token it attends to: every token of the text, both ways (bidirectional).\n");
  std::vector<HeatmapPanel> panels;
  for (int64_t i = 0; i < nl; ++i)
    for (int64_t j = 0; j < nh; ++j) {
      const std::string title =
          "layer " + std::to_string(layers[i]) + ", head " + std::to_string(heads[j]);
      const double* w = shown64.data<double>() + (i * nh + j) * T * T;
      std::cout << "\n-- " << title << " --\n" << heatmap_text(w, T, T, labels, labels, a.color);
      panels.push_back({title, w, T, T, labels, labels});
    }
  std::cout << "\n";
  if (!a.png.empty()) {
    try {
      write_heatmap_png(a.png, panels, static_cast<int>(nh));
    } catch (const Error& e) {
      throw Error(std::string("--png: ") + e.what());
    }
    std::cout << "wrote " << panels.size() << " heatmap panel" << (panels.size() > 1 ? "s" : "")
              << " (" << nl << " layer" << (nl > 1 ? "s" : "") << " x " << nh << " head"
              << (nh > 1 ? "s" : "") << ") to " << a.png << "\n";
  }
  if (!a.html.empty()) {
    try {
      write_attention_html(a.html, {a.model_dir, labels, shown, layers, heads, cfg.causal});
    } catch (const Error& e) {
      throw Error(std::string("--html: ") + e.what());
    }
    std::cout << "wrote the attention page to " << a.html
              << " (open it in a browser and hover a token)\n";
  }
  if (!a.weights_npy.empty()) {
    save_npy_arg("--weights-npy", a.weights_npy, shown);
    std::cout << "wrote the weights " << shape_str(shown.shape())
              << " float32 [layers, heads, query, key] to " << a.weights_npy << "\n";
  }
  return 0;
}

}  // namespace qkv::cli
