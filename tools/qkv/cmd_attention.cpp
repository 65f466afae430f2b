// qkv attention: the general entry point on .npy files, exactly the semantics
// of qkv::attention (see include/qkv/attention.h).
#include <iostream>

#include "cli_common.h"
#include "commands.h"
#include "qkv/attention.h"

namespace qkv::cli {
namespace {

struct AttentionArgs {
  std::string q, k, v, mask, causal = "none", weights, lse, out;
  std::optional<double> scale;
};

int run_attention(const AttentionArgs& a) {
  const Tensor q = load_npy_arg("--q", a.q);
  const Tensor k = load_npy_arg("--k", a.k);
  const Tensor v = load_npy_arg("--v", a.v);
  Tensor mask;
  AttentionOptions opts;
  if (!a.mask.empty()) {
    mask = load_npy_arg("--mask", a.mask);
    opts.mask = &mask;
  }
  opts.causal = *parse_causal(a.causal);  // CLI11 already checked the value
  opts.scale = a.scale;
  opts.return_weights = !a.weights.empty();
  opts.return_lse = !a.lse.empty();

  const AttentionResult res = attention(q, k, v, opts);
  save_npy_arg("--out", a.out, res.out);
  if (opts.return_weights) save_npy_arg("--weights", a.weights, res.weights);
  if (opts.return_lse) save_npy_arg("--lse", a.lse, res.lse);
  std::cout << "out " << shape_str(res.out.shape()) << " " << dtype_name(res.out.dtype())
            << " -> " << a.out << "\n";
  return 0;
}

}  // namespace

Runner add_attention(CLI::App& app) {
  auto args = std::make_shared<AttentionArgs>();
  CLI::App* cmd = app.add_subcommand(
      "attention",
      "Attention on .npy files: out = softmax(q kᵀ · scale + mask) v.\n"
      "Shapes: q [..., Hq, N, D], k [..., Hkv, S, D], v [..., Hkv, S, Dv] -> out [..., Hq, N, Dv];\n"
      "Hq must be a multiple of Hkv (GQA). float32 or float64; output in the input's dtype.");
  cmd->add_option("--q", args->q, "queries [..., Hq, N, D] (.npy)")->required();
  cmd->add_option("--k", args->k, "keys [..., Hkv, S, D] (.npy)")->required();
  cmd->add_option("--v", args->v, "values [..., Hkv, S, Dv] (.npy)")->required();
  cmd->add_option("--mask", args->mask,
                  "bool (true = may attend) or additive float mask, broadcastable to "
                  "[..., Hq, N, S] (.npy)");
  cmd->add_option("--causal", args->causal,
                  "none; top-left: query i sees keys j <= i; bottom-right: j <= i + S - N")
      ->check(CLI::IsMember({"none", "top-left", "bottom-right"}))
      ->capture_default_str();
  cmd->add_option("--scale", args->scale, "score scale (default 1/sqrt(D); 1 = no scaling)");
  cmd->add_option("--weights", args->weights, "also write the attention weights [..., Hq, N, S]");
  cmd->add_option("--lse", args->lse, "also write each row's log-sum-exp [..., Hq, N]");
  cmd->add_option("-o,--out", args->out, "output file for out [..., Hq, N, Dv] (.npy)")->required();
  cmd->footer(
      "A row with no visible key gives out = 0, weights = 0 and lse = -inf.\n"
      "NaN or Inf in q, k or v is rejected (exit 1). Exit codes: 0 ok, 1 bad data, 2 usage.");
  return [args] { return run_attention(*args); };
}

}  // namespace qkv::cli
