// qkv attention: the general entry point on .npy files, exactly the semantics
// of qkv::attention (see include/qkv/attention.h).
#include <charconv>
#include <cmath>
#include <iostream>
#include <limits>

#include "cli_common.h"
#include "field_flags.h"
#include "commands.h"
#include "one_head.h"
#include "sequence_parallel.h"
#include "qkv/attention.h"

namespace qkv::cli {
namespace {

struct AttentionArgs {
  std::string q, k, v, mask, causal = "none", weights, lse, out, kernel = "auto";
  std::string dtype = "as-loaded";  // or bf16: q, k, v converted on load
  // Parsed here rather than by CLI11 so that every malformed value gets the
  // same "expected ..., found ..." message.
  std::optional<std::string> window, key_lengths, alibi_slopes, softcap, scale, threads;
  bool alibi = false;
  bool sequence_parallel = false;
};

// `s` as one number >= min: the whole string, finite; std::nullopt otherwise.
template <class T>
std::optional<T> to_number(const std::string& s, T min) {
  T x{};
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, x);
  if (ec != std::errc() || ptr != end || !std::isfinite(static_cast<double>(x)) || x < min)
    return std::nullopt;
  return x;
}

// The comma-separated numbers of option `opt`'s value `s`, each >= min, and
// `count` of them unless count is 0; otherwise a UsageError saying `expected`.
template <class T>
std::vector<T> to_numbers(const char* opt, const std::string& s, T min, size_t count,
                          const char* expected) {
  std::vector<T> out;
  bool ok = true;
  for (size_t start = 0; ok;) {
    const size_t comma = s.find(',', start);
    const std::optional<T> x = to_number<T>(s.substr(start, comma - start), min);
    ok = x.has_value();
    if (ok) out.push_back(*x);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!ok || (count != 0 && out.size() != count))
    throw UsageError(std::string(opt) + ": expected " + expected + ", found '" + s + "'");
  return out;
}

// The slopes of the ALiBi paper (Press et al., 2022, and its reference code)
// for `heads` heads: 2^(-8(h+1)/heads) when heads is a power of two;
// otherwise those for the largest power of two p below heads, followed by
// every other slope of the 2p-head sequence (1st, 3rd, ...): 2^(-8(2i+1)/(2p)).
std::vector<double> alibi_paper_slopes(int64_t heads) {
  int64_t p = 1;
  while (p * 2 <= heads) p *= 2;
  std::vector<double> slopes;
  for (int64_t h = 0; h < p; ++h) slopes.push_back(std::exp2(-8.0 * double(h + 1) / double(p)));
  for (int64_t i = 0; i < heads - p; ++i)
    slopes.push_back(std::exp2(-8.0 * double(2 * i + 1) / double(2 * p)));
  return slopes;
}

// The options given as numbers; they need no data, only well-formed values.
void parse_number_options(const AttentionArgs& a, AttentionOptions& opts) {
  constexpr double kAny = -std::numeric_limits<double>::infinity();
  if (a.window) {
    const auto w = to_numbers<int64_t>("--window", *a.window, -1, 2,
                                       "LEFT,RIGHT, two integers >= -1 (-1 = unbounded)");
    opts.window = SlidingWindow{w[0], w[1]};
  }
  if (a.key_lengths)
    opts.key_lengths = to_numbers<int64_t>("--key-lengths", *a.key_lengths, 0, 0,
                                           "comma-separated integers >= 0");
  if (a.alibi_slopes)
    opts.alibi_slopes = to_numbers<double>("--alibi-slopes", *a.alibi_slopes, kAny, 0,
                                           "comma-separated finite numbers");
  if (a.softcap)
    opts.softcap =
        to_numbers<double>("--softcap", *a.softcap, 0.0, 1, "a number >= 0 (0 = off)")[0];
  // NaN, inf and "" are usage errors naming the option, like every other value.
  if (a.scale) opts.scale = to_numbers<double>("--scale", *a.scale, kAny, 1, "a finite number")[0];
  if (a.threads) opts.threads = parse_threads("--threads", *a.threads);
}

// Refuses outputs that could not fit in memory before attention() allocates
// them: out [..., Hq, N, Dv], and with --weights [..., Hq, N, S] (N·S floats
// per head, the one that grows quadratically) and --lse [..., Hq, N]. The
// inputs are already loaded, so they fit. Computed in double from q, k and v
// as they are; only when that is too big are the shapes checked properly, so
// that a shape error is reported as one, not as a memory error.
void check_output_memory(const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionOptions& opts) {
  if (q.rank() < 3 || k.rank() < 3 || v.rank() < 3) return;  // attention() says why
  double rows = 1.0;  // B·Hq·N
  for (int64_t i = 0; i + 1 < q.rank(); ++i) rows *= static_cast<double>(q.dim(i));
  const double S = static_cast<double>(k.dim(-2)), Dv = static_cast<double>(v.dim(-1));
  // bf16 inputs give float32 results.
  const double elem = q.dtype() == DType::bf16 ? 4.0 : static_cast<double>(dtype_size(q.dtype()));
  const double out = rows * Dv * elem, weights = opts.return_weights ? rows * S * elem : 0.0;
  const double lse = opts.return_lse ? rows * elem : 0.0;
  const double inputs = static_cast<double>(q.nbytes() + k.nbytes() + v.nbytes());
  if (memory_shortfall("", inputs + out + weights + lse).empty()) return;
  const Shape wshape = attention_shapes(q, k, v, opts).weights;  // throws if the shapes are wrong
  const std::string what =
      opts.return_weights && weights >= out
          ? "--weights: the attention weights " + shape_str(wshape) + " " + dtype_name(q.dtype()) +
                " with q, k, v and out"
          : "--out: q, k, v and the output";
  throw Error(memory_shortfall(what, inputs + out + weights + lse));
}

// The options ring attention does not take, as "--mask, --window" (used
// only in a build with MPI).
[[maybe_unused]] std::string not_for_the_ring(const AttentionArgs& a) {
  std::string names;
  auto add = [&](bool given, const char* name) {
    if (given) names += (names.empty() ? "" : ", ") + std::string(name);
  };
  add(!a.mask.empty(), "--mask");
  add(a.window.has_value(), "--window");
  add(a.key_lengths.has_value(), "--key-lengths");
  add(a.alibi || a.alibi_slopes.has_value(), "--alibi");
  add(a.softcap.has_value(), "--softcap");
  add(!a.weights.empty(), "--weights");
  add(a.dtype != "as-loaded", "--dtype");
  return names;
}

int run_attention(const AttentionArgs& a) {
  AttentionOptions opts;
  parse_number_options(a, opts);  // before loading, so a typo costs no I/O
  opts.causal = as_usage(kAttentionFlags, [&] { return parse_causal(a.causal); });
  opts.kernel = as_usage(kAttentionFlags, [&] { return parse_kernel(a.kernel); });
  if (a.sequence_parallel) {
#ifdef QKV_HAVE_MPI
    return run_sequence_parallel({a.q, a.k, a.v, a.out, a.lse, a.causal, a.kernel, opts.scale,
                                  opts.threads, not_for_the_ring(a)});
#else
    throw UsageError("--sequence-parallel: this qkv was built without MPI (QKV_MPI=OFF)");
#endif
  }
  Tensor q = load_npy_arg("--q", a.q);
  Tensor k = load_npy_arg("--k", a.k);
  Tensor v = load_npy_arg("--v", a.v);
  if (a.dtype == "bf16") {
    // .npy has no bfloat16: round the float32/float64 files once, here. The
    // results are float32 (written as .npy), computed from the bf16 values.
    for (Tensor* t : {&q, &k, &v}) *t = t->to(DType::bf16);
    opts.out_dtype = DType::f32;
  }
  const bool one_head = lift_one_head(q, k, v);  // 2-D (N, D): out, weights, lse 2-D too
  Tensor mask;
  if (!a.mask.empty()) {
    mask = load_npy_arg("--mask", a.mask);
    opts.mask = mask;
  }
  // Hq is q's third dim from the end; a q with fewer dims is reported by attention().
  if (a.alibi && q.rank() >= 3) opts.alibi_slopes = alibi_paper_slopes(q.dim(-3));
  opts.return_weights = !a.weights.empty();
  opts.return_lse = !a.lse.empty();
  check_output_memory(q, k, v, opts);

  const AttentionResult res = attention(q, k, v, opts);
  // All outputs or none: each is staged beside its target, and only when
  // every one is written do they replace what was there.
  auto as_given = [&](const Tensor& t) { return one_head ? drop_head(t) : t; };
  const Tensor out = as_given(res.out);
  FileSet files;
  stage_npy_arg(files, "--out", a.out, out);
  if (opts.return_weights) stage_npy_arg(files, "--weights", a.weights, as_given(res.weights));
  if (opts.return_lse) stage_npy_arg(files, "--lse", a.lse, as_given(res.lse));
  files.commit();
  std::cout << "out " << shape_str(out.shape()) << " " << dtype_name(out.dtype())
            << " -> " << a.out << "\n";
  return 0;
}

}  // namespace

Runner add_attention(CLI::App& app) {
  auto args = std::make_shared<AttentionArgs>();
  CLI::App* cmd = app.add_subcommand(
      "attention",
      "Attention on .npy files: out = softmax(cap(q kᵀ · scale) + alibi + mask) v.\n"
      "Shapes: q [..., Hq, N, D], k [..., Hkv, S, D], v [..., Hkv, S, Dv] -> out [..., Hq, N, Dv];\n"
      "Hq must be a multiple of Hkv (GQA). float32 or float64; output in the input's dtype\n"
      "(--dtype bf16: inputs rounded to bfloat16 on load, float32 output).\n"
      "2-D q (N, D), k (S, D), v (S, Dv), as in the lessons, are one head: out (N, Dv).");
  cmd->add_option("--q", args->q, "queries [..., Hq, N, D] (.npy)")->required();
  cmd->add_option("--k", args->k, "keys [..., Hkv, S, D] (.npy)")->required();
  cmd->add_option("--v", args->v, "values [..., Hkv, S, Dv] (.npy)")->required();
  cmd->add_option("--mask", args->mask,
                  "bool (true = may attend) or additive float mask, broadcastable to "
                  "[..., Hq, N, S] (.npy)");
  cmd->add_option("--causal", args->causal,
                  "none; top-left: query i sees keys j <= i; bottom-right: j <= i + S - N")
      ->capture_default_str();
  cmd->add_option("--window", args->window,
                  "query i sees keys a(i) - LEFT <= j <= a(i) + RIGHT, a(i) its diagonal "
                  "(aligned like --causal); -1 = unbounded, e.g. 128,0")
      ->type_name("LEFT,RIGHT");
  cmd->add_option("--key-lengths", args->key_lengths,
                  "one length L per batch element (leading dims flattened); keys j >= L are "
                  "padding")
      ->type_name("L0,L1,...");
  CLI::Option* alibi = cmd->add_flag(
      "--alibi", args->alibi, "ALiBi with the paper's slopes for Hq heads: 2^(-8(h+1)/Hq), ...");
  cmd->add_option("--alibi-slopes", args->alibi_slopes,
                  "one ALiBi slope per query head; adds -slope * |a(i) - j| to the scores")
      ->type_name("A0,A1,...")
      ->excludes(alibi);
  cmd->add_option("--softcap", args->softcap,
                  "scores become C * tanh(scores / C) after scaling, before bias and mask; 0 = off")
      ->type_name("C");
  cmd->add_option("--scale", args->scale, "score scale (default 1/sqrt(D); 1 = no scaling)")
      ->type_name("S");
  cmd->add_option("--dtype", args->dtype,
                  "as-loaded, or bf16: round q, k, v to bfloat16 on load (.npy has no bfloat16, "
                  "so float32/float64 files are converted) and compute with float32 "
                  "accumulation; out, weights and lse are written as float32")
      ->check(CLI::IsMember({"as-loaded", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--kernel", args->kernel,
                  "reference (plain loops, double sums), fast (tiled SIMD, float32 and bf16) or "
                  "auto (fast for float32 and bf16, reference for float64)")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "threads for the fast kernel (default 0 = all cores; at most 4 x cores)")
      ->type_name("N");
  cmd->add_option("--weights", args->weights, "also write the attention weights [..., Hq, N, S]");
  cmd->add_option("--lse", args->lse, "also write each row's log-sum-exp [..., Hq, N]");
  cmd->add_option("-o,--out", args->out, "output file for out [..., Hq, N, Dv] (.npy)")->required();
  cmd->add_flag("--sequence-parallel", args->sequence_parallel,
                "under mpirun: split the sequence across the ranks (ring attention; "
                "self-attention, causal none or top-left); rank 0 writes the outputs");
  cmd->footer(
      "Every rule that hides a key (mask, causal, window, key lengths, -inf) combines by AND.\n"
      "A row with no visible key gives out = 0, weights = 0 and lse = -inf.\n"
      "NaN or Inf in q, k or v is rejected (exit 1). Exit codes: 0 ok, 1 bad data, 2 usage.");
  path_options(cmd, {.reads = {"--q", "--k", "--v", "--mask"}, .writes = {"--out", "--weights", "--lse"}});
  return [args] { return run_attention(*args); };
}

}  // namespace qkv::cli
