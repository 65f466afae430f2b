#include "bench_suite.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

namespace qkv::cli {
namespace {

// The reference runs on the whole problem up to this many flops (about 0.2 s:
// it ran at 1.2 GFLOP/s here on N=S=256, D=64); above, on kReferenceRows rows
// of one head.
constexpr double kReferenceWholeFlops = 2e8;
constexpr int64_t kReferenceRows = 64;
// The reference gives steady times; a few runs are enough.
constexpr int kReferenceReps = 3;

// Uniform floats in [-1, 1) from splitmix64: a fixed seed gives the same
// inputs every run, at about a nanosecond per value (a normal generator would
// take seconds to fill the largest decode K/V).
Tensor random_tensor(Shape shape, uint64_t seed) {
  Tensor t(DType::f32, std::move(shape));
  float* p = t.data<float>();
  uint64_t x = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;  // 24 random bits
  }
  return t;
}

double median_ms(int warmup, int reps, const std::function<void()>& run) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t m = ms.size() / 2;
  return ms.size() % 2 ? ms[m] : 0.5 * (ms[m - 1] + ms[m]);
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

AttentionOptions options_for(const BenchCase& c, Kernel kernel, int threads) {
  AttentionOptions opts;
  opts.causal = c.causal;
  if (c.window) opts.window = SlidingWindow{*c.window, 0};
  opts.kernel = kernel;
  opts.threads = threads;
  return opts;
}

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

// The reference's rows of a problem too big to run whole: the last R query
// rows of batch 0, query head 0 (with a causal mask they see the most keys,
// so their cost per pair is the typical one), against all of that head's
// keys. Under a causal mask or window, a [R, S] bool mask carries over
// exactly what those rows see in the whole problem, whatever the alignment.
struct ReferenceRows {
  Tensor q, k, v, mask;
  int64_t first_row;  // of the whole problem
  int64_t pairs;      // visible pairs in these rows
};

ReferenceRows reference_rows(const BenchCase& c, const Tensor& q, const Tensor& k,
                             const Tensor& v) {
  const int64_t R = std::min(c.n, kReferenceRows);
  ReferenceRows sub{Tensor(DType::f32, {1, R, c.d}), Tensor(DType::f32, {1, c.s, c.d}),
                    Tensor(DType::f32, {1, c.s, c.dv}), Tensor(DType::boolean, {R, c.s}),
                    c.n - R, 0};
  // Row-major: head 0 of batch 0 comes first in q, k and v.
  std::memcpy(sub.q.data<float>(), q.data<float>() + sub.first_row * c.d, R * c.d * sizeof(float));
  std::memcpy(sub.k.data<float>(), k.data<float>(), c.s * c.d * sizeof(float));
  std::memcpy(sub.v.data<float>(), v.data<float>(), c.s * c.dv * sizeof(float));
  bool* m = sub.mask.data<bool>();
  for (int64_t r = 0; r < R; ++r) {
    const KeyRange keys = visible_keys(c, sub.first_row + r);
    for (int64_t j = keys.first; j <= keys.last; ++j) m[r * c.s + j] = true;
    sub.pairs += std::max<int64_t>(0, keys.last - keys.first + 1);
  }
  return sub;
}

}  // namespace

std::string case_label(const BenchCase& c) {
  std::string s;
  auto add = [&s](const char* name, int64_t value) { (s += name) += std::to_string(value); };
  add("B", c.batch);
  add(" H", c.heads);
  add("/", c.kv_heads);
  add(" N", c.n);
  add(" S", c.s);
  add(" D", c.d);
  if (c.dv != c.d) add(" Dv", c.dv);
  if (c.causal != Causal::none) (s += " ") += causal_name(c.causal);
  if (c.window) add(" window", *c.window);
  if (c.dtype == DType::bf16) s += " bf16";
  return s;
}

bool is_decode(const BenchCase& c) { return c.n <= 16; }

KeyRange visible_keys(const BenchCase& c, int64_t i) {
  const int64_t diag = c.causal == Causal::bottom_right ? i + c.s - c.n : i;
  KeyRange r{0, c.s - 1};
  if (c.causal != Causal::none || c.window) r.last = std::min(r.last, diag);
  if (c.window) r.first = std::max<int64_t>(0, diag - *c.window);
  return r;
}

int64_t visible_pairs(const BenchCase& c) {
  int64_t per_head = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    const KeyRange r = visible_keys(c, i);
    per_head += std::max<int64_t>(0, r.last - r.first + 1);
  }
  return c.batch * c.heads * per_head;
}

double case_flops(const BenchCase& c) {
  return static_cast<double>(visible_pairs(c)) * static_cast<double>(2 * c.d + 2 * c.dv);
}

double kv_bytes(const BenchCase& c) {
  // first and last never decrease with i, so the union of the rows' ranges
  // is one sweep.
  int64_t keys = 0, reach = -1;
  for (int64_t i = 0; i < c.n; ++i) {
    const KeyRange r = visible_keys(c, i);
    const int64_t from = std::max(r.first, reach + 1);
    if (r.last >= from) keys += r.last - from + 1;
    reach = std::max(reach, r.last);
  }
  return static_cast<double>(c.batch * c.kv_heads * keys) *
         static_cast<double>(c.d + c.dv) * static_cast<double>(dtype_size(c.dtype));
}

std::vector<BenchCase> standard_suite() {
  std::vector<BenchCase> cases;
  for (int64_t d : {64, 128})
    for (Causal causal : {Causal::none, Causal::top_left})
      for (int64_t n : {512, 1024, 2048, 4096})
        cases.push_back({1, 8, 8, n, n, d, d, causal, std::nullopt});
  cases.push_back({1, 32, 8, 2048, 2048, 128, 128, Causal::none, std::nullopt});  // GQA
  for (int64_t s : {4096, 32768})
    cases.push_back({1, 32, 8, 1, s, 128, 128, Causal::none, std::nullopt});  // decode
  cases.push_back({1, 1, 1, 65536, 65536, 64, 64, Causal::none, std::nullopt});  // long
  return cases;
}

CaseResult measure_case(const BenchCase& c, const BenchSettings& s) {
  Tensor q = random_tensor({c.batch, c.heads, c.n, c.d}, 1);
  Tensor k = random_tensor({c.batch, c.kv_heads, c.s, c.d}, 2);
  Tensor v = random_tensor({c.batch, c.kv_heads, c.s, c.dv}, 3);
  // bf16: the timed kernel reads the rounded tensors; the reference below
  // reads them widened back to float32 (exact), so both see the same values.
  Tensor qb, kb, vb;
  if (c.dtype == DType::bf16) {
    qb = q.to(DType::bf16), kb = k.to(DType::bf16), vb = v.to(DType::bf16);
    q = qb.to(DType::f32), k = kb.to(DType::f32), v = vb.to(DType::f32);
  }
  const bool bf16 = c.dtype == DType::bf16;
  const Tensor& qt = bf16 ? qb : q;
  const Tensor& kt = bf16 ? kb : k;
  const Tensor& vt = bf16 ? vb : v;
  // The timed kernel's out as float32 (a bf16 out widened).
  auto timed_out = [&](const AttentionOptions& o) {
    const Tensor out = attention(qt, kt, vt, o).out;
    return bf16 ? out.to(DType::f32) : out;
  };
  AttentionOptions opts = options_for(c, s.kernel, s.threads);
  opts.check_finite = s.check_finite;

  CaseResult r{};
  // attention_into reuses the output tensors: after the warm-up no call
  // allocates, so the timing is the kernel's, not the page faults'.
  AttentionResult res;
  r.median_ms = median_ms(s.warmup, s.reps, [&] { attention_into(res, qt, kt, vt, opts); });
  r.rss_mb = peak_rss_mb();
  r.max_abs_err = -1.0;

  if (s.kernel == Kernel::reference) {
    r.ref_ms = r.median_ms;
    return r;
  }
  const AttentionOptions ref_opts = options_for(c, Kernel::reference, 1);
  const int ref_warmup = std::min(s.warmup, 1), ref_reps = std::min(s.reps, kReferenceReps);
  if (case_flops(c) <= kReferenceWholeFlops) {
    r.ref_ms = median_ms(ref_warmup, ref_reps, [&] { attention(q, k, v, ref_opts); });
    if (s.compare_reference) {
      const Tensor out = timed_out(opts), ref = attention(q, k, v, ref_opts).out;
      r.max_abs_err = max_abs_diff(out.data<float>(), ref.data<float>(), out.numel());
    }
    return r;
  }
  const ReferenceRows sub = reference_rows(c, q, k, v);
  AttentionOptions sub_opts;
  if (c.causal != Causal::none || c.window) sub_opts.mask = sub.mask;
  sub_opts.kernel = Kernel::reference;
  const double sub_ms =
      median_ms(ref_warmup, ref_reps, [&] { attention(sub.q, sub.k, sub.v, sub_opts); });
  r.ref_rows = sub.q.dim(1);
  r.ref_ms = sub.pairs > 0 ? sub_ms * static_cast<double>(visible_pairs(c)) / sub.pairs : sub_ms;
  if (s.compare_reference) {
    const Tensor out = timed_out(opts);
    const Tensor ref = attention(sub.q, sub.k, sub.v, sub_opts).out;
    r.max_abs_err = max_abs_diff(out.data<float>() + sub.first_row * c.dv, ref.data<float>(),
                                 ref.numel());
  }
  return r;
}

}  // namespace qkv::cli
