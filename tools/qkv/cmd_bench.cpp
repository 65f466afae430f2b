// qkv bench: how fast attention runs on this machine. Per case: median time,
// GFLOP/s over the visible (query, key) pairs only, the fraction of this
// machine's measured FMA peak, the speed-up over the reference kernel, peak
// RSS, and for decode shapes the K/V read bandwidth against the measured
// memory bandwidth. A benchmark, not a test: nothing here passes or fails.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>
#include <type_traits>

#include "bench_suite.h"
#include "cli_common.h"
#include "field_flags.h"
#include "commands.h"
#include "qkv/runtime.h"
#include "support/peak.h"

namespace qkv::cli {
namespace {

struct BenchArgs {
  int64_t batch = 1, heads = 8, n = 1024, d = 64;
  std::optional<int64_t> kv_heads, s, dv, window;  // unset: Hq, N, D and no window
  std::string causal = "none", kernel = "auto", dtype = "float32";
  int threads = 0, reps = 5, warmup = 1;
  bool json = false, suite = false, compare_reference = false, check_finite = false;
};

void require_at_least(const char* flag, int64_t min, int64_t value) {
  if (value < min)
    throw UsageError(std::string(flag) + ": expected " +
                     (min == 0 ? "a non-negative" : "a positive") + " integer, found " +
                     std::to_string(value));
}

BenchCase case_from(const BenchArgs& a) {
  BenchCase c;
  c.batch = a.batch;
  c.heads = a.heads;
  c.kv_heads = a.kv_heads.value_or(a.heads);
  c.n = a.n;
  c.s = a.s.value_or(a.n);
  c.d = a.d;
  c.dv = a.dv.value_or(a.d);
  c.window = a.window;
  c.dtype = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  for (auto [flag, value] : {std::pair{"--batch", c.batch}, {"--heads", c.heads},
                             {"--kv-heads", c.kv_heads}, {"--n", c.n}, {"--s", c.s},
                             {"--d", c.d}, {"--dv", c.dv}})
    require_at_least(flag, 1, value);
  if (c.heads % c.kv_heads != 0)
    throw UsageError("--kv-heads: expected a divisor of --heads " + std::to_string(c.heads) +
                     ", found " + std::to_string(c.kv_heads));
  if (c.window) require_at_least("--window", 0, *c.window);
  c.causal = as_usage(kAttentionFlags, [&] { return parse_causal(a.causal); });
  // q, k, v and out in float32, plus a second output when the reference is
  // compared; in double, so sizes whose product overflows are refused too.
  const double B = static_cast<double>(c.batch), N = static_cast<double>(c.n),
               S = static_cast<double>(c.s);
  const double D = static_cast<double>(c.d), Dv = static_cast<double>(c.dv);
  const double floats = B * static_cast<double>(c.heads) * N * (D + 2.0 * Dv) +
                        B * static_cast<double>(c.kv_heads) * S * (D + Dv);
  const std::string refused = memory_shortfall(
      "--batch " + std::to_string(c.batch) + " --heads " + std::to_string(c.heads) + " --kv-heads " +
          std::to_string(c.kv_heads) + " --n " + std::to_string(c.n) + " --s " +
          std::to_string(c.s) + " --d " + std::to_string(c.d) + " --dv " + std::to_string(c.dv) +
          ": q, k, v and out in float32",
      4.0 * floats);
  if (!refused.empty()) throw UsageError(refused);
  return c;
}

BenchSettings settings_from(const BenchArgs& a) {
  check_threads("--threads", a.threads);
  require_at_least("--reps", 1, a.reps);
  require_at_least("--warmup", 0, a.warmup);
  const Kernel kernel = as_usage(kAttentionFlags, [&] { return parse_kernel(a.kernel); });
  return {kernel, a.threads ? a.threads : default_threads(), a.reps, a.warmup,
          a.compare_reference, a.check_finite};
}

// Runs fn() in a forked child and returns its result. Every case gets a
// process of its own because peak RSS is a high-water mark over a process's
// whole life: in one process each case would report the largest case before
// it (and the 256 MiB bandwidth buffer). The parent itself never starts an
// OpenMP thread, so forking it is safe.
template <class T, class Fn>
T in_child(Fn fn) {
  static_assert(std::is_trivially_copyable_v<T>);
  struct Message {
    bool ok;
    T value;
    char error[512];
  };
  int fds[2];
  if (pipe(fds) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  std::cout.flush();  // or the child's copy of the buffer would print twice
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    Message m{};
    try {
      m.value = fn();
      m.ok = true;
    } catch (const std::bad_alloc&) {
      std::snprintf(m.error, sizeof m.error, "out of memory");
    } catch (const std::exception& e) {
      std::snprintf(m.error, sizeof m.error, "%s", e.what());
    }
    const ssize_t written = write(fds[1], &m, sizeof m);  // < pipe buffer: one write
    _exit(written == static_cast<ssize_t>(sizeof m) ? 0 : 1);
  }
  close(fds[1]);
  Message m{};
  size_t got = 0;
  for (ssize_t r; got < sizeof m && (r = read(fds[0], reinterpret_cast<char*>(&m) + got,
                                              sizeof m - got)) > 0;)
    got += static_cast<size_t>(r);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof m) {
    if (WIFSIGNALED(status))
      throw Error(std::string("the measuring process was killed by signal ") +
                  strsignal(WTERMSIG(status)) +
                  (WTERMSIG(status) == SIGKILL ? " (out of memory?)" : ""));
    throw Error("the measuring process exited without a result");
  }
  if (!m.ok) throw Error(m.error);
  return m.value;
}

struct Peaks {
  double fma_gflops;      // all threads at once
  double one_thread_gflops;
  double read_gbps;       // 0 when no decode case needs it
  bool busy;              // threads did not scale: another process held a core
};

// A core that another process holds while the peak is measured makes the
// peak look low and every fraction of it high (the first suite run here
// reported 165% of a 2-thread "peak" that was one core's). So the all-thread
// peak is checked against one thread's times the cores it can use, and
// measured again a few times if it falls short.
Peaks measure_peaks(Isa isa, int threads, bool need_bandwidth) {
  Peaks p{};
  p.one_thread_gflops = measure_fma_gflops(isa, 1);
  if (threads == 1) p.fma_gflops = p.one_thread_gflops;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double expected = p.one_thread_gflops * std::min<unsigned>(threads, cores);
  for (int attempt = 0; attempt < 5 && p.fma_gflops < 0.9 * expected; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    p.fma_gflops = std::max(p.fma_gflops, measure_fma_gflops(isa, threads));
  }
  p.busy = p.fma_gflops < 0.9 * expected;
  if (need_bandwidth) p.read_gbps = measure_read_gbps(threads);
  return p;
}

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// One flat JSON object. Keys and text values are fixed identifiers (kernel,
// ISA and causal names, case labels), so nothing needs escaping.
class JsonLine {
 public:
  JsonLine& text(const char* key, const std::string& value) { return raw(key, '"' + value + '"'); }
  JsonLine& integer(const char* key, int64_t value) { return raw(key, std::to_string(value)); }
  JsonLine& number(const char* key, std::optional<double> value) {
    return raw(key, value && std::isfinite(*value) ? fmt("%.6g", *value) : "null");
  }
  JsonLine& boolean(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonLine& raw(const char* key, const std::string& value) {
    if (!body_.empty()) body_ += ", ";
    body_ += '"' + std::string(key) + "\": " + value;
    return *this;
  }
  std::string body_;
};

// Everything printed for a case, derived from what was measured.
struct Row {
  double gflops, peak_fraction, speedup;
  std::optional<double> kv_gbps, bw_fraction, max_abs_err;
};

Row derive(const BenchCase& c, const CaseResult& r, const Peaks& peaks) {
  Row row{};
  row.gflops = case_flops(c) / (r.median_ms * 1e6);
  row.peak_fraction = row.gflops / peaks.fma_gflops;
  row.speedup = r.ref_ms / r.median_ms;
  if (is_decode(c)) {
    row.kv_gbps = kv_bytes(c) / (r.median_ms * 1e6);
    row.bw_fraction = *row.kv_gbps / peaks.read_gbps;
  }
  if (r.max_abs_err >= 0) row.max_abs_err = r.max_abs_err;
  return row;
}

// The CPU model is free text: quotes and backslashes are dropped so the
// line stays valid JSON.
std::string json_line(const BenchCase& c, const BenchSettings& s, const CaseResult& r,
                      const Row& row, const Peaks& peaks, std::string cpu) {
  cpu.erase(std::remove_if(cpu.begin(), cpu.end(),
                           [](char ch) { return ch == '"' || ch == '\\' || ch < 0x20; }),
            cpu.end());
  JsonLine j;
  j.text("cpu", cpu);
  j.text("case", case_label(c)).integer("batch", c.batch).integer("heads", c.heads)
      .integer("kv_heads", c.kv_heads).integer("n", c.n).integer("s", c.s).integer("d", c.d)
      .integer("dv", c.dv).text("causal", causal_name(c.causal));
  if (c.window)
    j.integer("window", *c.window);
  else
    j.number("window", std::nullopt);
  j.text("dtype", c.dtype == DType::bf16 ? "bf16" : "float32")
      .text("kernel", kernel_name(s.kernel)).text("isa", isa_name(active_isa()))
      .boolean("check_finite", s.check_finite)
      .integer("threads", s.threads).integer("reps", s.reps).integer("warmup", s.warmup)
      .integer("pairs", visible_pairs(c)).number("flops", case_flops(c))
      .number("median_ms", r.median_ms).number("gflops", row.gflops)
      .number("peak_gflops", peaks.fma_gflops).number("peak_fraction", row.peak_fraction)
      .number("peak_gflops_1t", peaks.one_thread_gflops).boolean("peak_busy", peaks.busy)
      .number("ref_ms", r.ref_ms).integer("ref_rows", r.ref_rows)
      .boolean("ref_scaled", r.ref_rows > 0).number("speedup", row.speedup)
      .number("rss_mb", r.rss_mb).number("kv_gbps", row.kv_gbps)
      .number("mem_gbps", is_decode(c) ? std::optional(peaks.read_gbps) : std::nullopt)
      .number("bw_fraction", row.bw_fraction).number("max_abs_err", row.max_abs_err);
  return j.str();
}

// The text table: one header, then a row per case as soon as it is measured.
class Table {
 public:
  Table(const std::vector<BenchCase>& cases, bool with_error) : with_error_(with_error) {
    for (const auto& c : cases) width_ = std::max(width_, case_label(c).size());
  }
  void header() const {
    std::printf("%-*s %10s %9s %7s %10s %8s %9s %7s%s\n", int(width_), "case", "ms", "GFLOP/s",
                "%peak", "vs ref", "RSS MiB", "K/V GB/s", "%bw", with_error_ ? "  max|err|" : "");
  }
  void row(const BenchCase& c, const CaseResult& r, const Row& row) {
    if (r.ref_rows > 0) scaled_ref_rows_ = r.ref_rows;
    const std::string kv = row.kv_gbps ? fmt("%.1f", *row.kv_gbps) : "-";
    const std::string bw = row.bw_fraction ? fmt("%.1f%%", 100 * *row.bw_fraction) : "-";
    std::string err;
    if (with_error_) err = row.max_abs_err ? fmt("  %.1e", *row.max_abs_err) : "  -";
    std::printf("%-*s %10.3f %9.1f %6.1f%% %9.1fx%c %8.1f %9s %7s%s\n", int(width_),
                case_label(c).c_str(), r.median_ms, row.gflops, 100 * row.peak_fraction,
                row.speedup, r.ref_rows > 0 ? '*' : ' ', r.rss_mb, kv.c_str(), bw.c_str(),
                err.c_str());
    std::fflush(stdout);
  }
  void notes() const {
    std::printf(
        "GFLOP/s counts only the visible (query, key) pairs, 2·D + 2·Dv flops each; %%peak is of "
        "the FMA peak above.\n"
        "vs ref: speed-up over the reference kernel (plain loops, double sums) on the same "
        "inputs.\n");
    if (scaled_ref_rows_)
      std::printf(
          "* the reference was timed on the last %lld query rows of one head (the whole problem "
          "would take too long) and scaled to the whole problem by visible pairs.\n",
          static_cast<long long>(scaled_ref_rows_));
  }

 private:
  size_t width_ = 4;
  bool with_error_;
  int64_t scaled_ref_rows_ = 0;  // rows the reference ran on, where it ran on a subset
};

int run_bench(const BenchArgs& a) {
  const BenchSettings settings = settings_from(a);
  std::vector<BenchCase> cases = a.suite ? standard_suite() : std::vector{case_from(a)};
  for (BenchCase& c : cases) c.dtype = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  const std::string cpu = cpu_model_name();
  const Isa isa = active_isa();
  bool any_decode = false;
  for (const auto& c : cases) any_decode = any_decode || is_decode(c);

  const Peaks peaks =
      in_child<Peaks>([&] { return measure_peaks(isa, settings.threads, any_decode); });
  if (peaks.busy)
    std::fprintf(stderr,
                 "qkv bench: warning: FMA peak on %d threads is only %.1fx one thread's; the "
                 "machine looks busy, so fractions of peak will read high\n",
                 settings.threads, peaks.fma_gflops / peaks.one_thread_gflops);
  Table table(cases, settings.compare_reference);
  if (!a.json) {
    std::printf("qkv bench: %s; kernel %s, isa %s, %s, %d thread%s; measured on this machine: "
                "FMA peak %.1f GFLOP/s (%.1f on one thread)",
                cpu.c_str(), kernel_name(settings.kernel), isa_name(isa), a.dtype.c_str(),
                settings.threads,
                settings.threads == 1 ? "" : "s", peaks.fma_gflops, peaks.one_thread_gflops);
    if (any_decode)
      std::printf(", memory read %.1f GB/s (buffer 4x L3, >= 256 MiB)", peaks.read_gbps);
    std::printf("\n");
    table.header();
  }
  for (const auto& c : cases) {
    const CaseResult r = in_child<CaseResult>([&] { return measure_case(c, settings); });
    const Row row = derive(c, r, peaks);
    if (a.json) {
      std::printf("%s\n", json_line(c, settings, r, row, peaks, cpu).c_str());
      std::fflush(stdout);
    } else {
      table.row(c, r, row);
    }
  }
  if (!a.json) table.notes();
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time attention on random float32 (or bf16) inputs (fixed seed) and compare with this machine's\n"
      "measured FMA peak and memory bandwidth, and with the reference kernel.\n"
      "Shapes: q [B, Hq, N, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv].");
  std::vector<CLI::Option*> shape = {
      cmd->add_option("--batch", a->batch, "batch size B")->capture_default_str(),
      cmd->add_option("--heads", a->heads, "query heads Hq")->capture_default_str(),
      cmd->add_option("--kv-heads", a->kv_heads, "key/value heads Hkv (default Hq; GQA if fewer)"),
      cmd->add_option("--n", a->n, "query length N")->capture_default_str(),
      cmd->add_option("--s", a->s, "key length S (default N)"),
      cmd->add_option("--d", a->d, "query/key head dim D")->capture_default_str(),
      cmd->add_option("--dv", a->dv, "value head dim Dv (default D)"),
      cmd->add_option("--causal", a->causal, "none, top-left or bottom-right")
          ->capture_default_str(),
      cmd->add_option("--window", a->window,
                      "sliding window: keys a query sees left of its diagonal (right side 0)"),
  };
  CLI::Option* suite =
      cmd->add_flag("--suite", a->suite, "run the standard shapes instead of one case");
  for (CLI::Option* o : shape) suite->excludes(o);
  cmd->add_option("--threads", a->threads, "threads for the kernel and the peak (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--kernel", a->kernel, "reference, fast or auto")->capture_default_str();
  cmd->add_option("--dtype", a->dtype,
                  "float32, or bf16: q, k, v made in float32 and rounded to bfloat16 before "
                  "timing (out in bf16; float32 accumulation)")
      ->check(CLI::IsMember({"float32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--reps", a->reps, "timed runs per case (the median is reported)")
      ->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed runs before them")->capture_default_str();
  cmd->add_flag("--json", a->json, "one JSON object per case per line, nothing else on stdout");
  cmd->add_flag("--check-finite", a->check_finite,
                "also time attention()'s scan of q, k, v for NaN/Inf (on by default in the "
                "library; one extra read of the inputs)");
  cmd->add_flag("--compare-reference", a->compare_reference,
                "also report the largest |difference| from the reference output on the rows "
                "the reference was timed on");
  // Whole numbers here; their ranges are checked with the case.
  constexpr int64_t kAny = std::numeric_limits<int64_t>::min();
  check_counts<int64_t>(cmd, {{"--batch", kAny, "a positive integer"}, {"--heads", kAny, "a positive integer"},
                              {"--kv-heads", kAny, "a divisor of --heads"}, {"--n", kAny, "a positive integer"},
                              {"--s", kAny, "a positive integer"}, {"--d", kAny, "a positive integer"},
                              {"--dv", kAny, "a positive integer"}, {"--window", kAny, "a non-negative integer"}});
  check_integers<int>(cmd, {"--threads"});
  check_counts<int>(cmd, {{"--reps", std::numeric_limits<int>::min(), "a positive integer"},
                          {"--warmup", std::numeric_limits<int>::min(), "a non-negative integer"}});
  cmd->footer(
      "GFLOP/s counts only visible (query, key) pairs: 2·D + 2·Dv flops each.\n"
      "Each case runs in its own process, so its peak RSS is its own. Exit codes: 0 ok, 1 a "
      "case failed, 2 usage.");
  return [a] { return run_bench(*a); };
}

}  // namespace qkv::cli
