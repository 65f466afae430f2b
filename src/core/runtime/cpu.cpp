// cpu.cpp: run-time choice of the SIMD path (see qkv/runtime.h).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <omp.h>

#include "qkv/error.h"
#include "qkv/runtime.h"

namespace qkv {
namespace {

// AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16): CPUID leaf 7 subleaf 1, EAX bit 5.
// libgcc 12's __builtin_cpu_supports does not know it; the OS state for the
// zmm registers is checked by the avx512f test it is combined with.
bool cpuid_avx512_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 1, a, b, c, d);
  return (a >> 5) & 1u;
}

// F16C (vcvtph2ps): CPUID leaf 1, ECX bit 29; clang's __builtin_cpu_supports
// does not know it by name. It uses the ymm state avx2's test checks.
bool cpuid_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c >> 29) & 1u;
}

// AMX-BF16 tiles: CPUID leaf 7 subleaf 0, EDX bit 22 (AMX-BF16) and bit 24
// (AMX-TILE); the OS must enable the tile state in XCR0 (bit 17 TILECFG,
// bit 18 TILEDATA), and Linux (5.16+) hands the 8 KiB of tile data to a
// process only once it asks (arch_prctl ARCH_REQ_XCOMP_PERM): without that,
// the first tile instruction faults. Asked once, for the whole process, when
// the path is first detected (it enlarges the process's signal frames by the
// 8 KiB of tile state; a kernel that refuses, e.g. for a too-small
// sigaltstack, leaves the avx512bf16 path in charge).
bool amx_usable() {
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;
    __cpuid(1, a, b, c, d);
    if (!((c >> 27) & 1u)) return false;  // OSXSAVE: XGETBV is allowed
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
  }();
  return usable;
}

// AVX512-VNNI: CPUID leaf 7 subleaf 0, ECX bit 11 (libgcc 12 knows it as
// "avx512vnni"; read here beside the other CPUID bits).
bool cpuid_avx512_vnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (c >> 11) & 1u;
}

bool cpu_can_run(Isa isa) {
  // libgcc's __builtin_cpu_supports also checks (via XGETBV) that the OS
  // saves the wide registers, so "avx512f" here means usable, not just present.
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2:  // every AVX2 CPU has F16C too; the quantized dots read their f16 scales with it
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_f16c();
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case Isa::avx512bf16: return cpu_can_run(Isa::avx512) && cpuid_avx512_bf16();
    case Isa::amx: return cpu_can_run(Isa::avx512bf16) && amx_usable();
  }
  return false;
}

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx};

// "amx, avx512bf16, avx512, avx2 or scalar": every name, most capable first.
std::string isa_choices() {
  std::string s;
  const auto isas = all_isas();
  for (size_t i = isas.size(); i-- > 0;)
    s += std::string(isa_name(isas[i])) + (i > 1 ? ", " : i == 1 ? " or " : "");
  return s;
}

// -1: not forced by set_isa.
std::atomic<int> g_forced{-1};

}  // namespace

std::span<const Isa> all_isas() { return kAllIsas; }

std::span<const Isa> available_isas() {
  static const std::vector<Isa> runnable = [] {
    std::vector<Isa> v;
    for (Isa isa : kAllIsas)
      if (cpu_can_run(isa)) v.push_back(isa);
    return v;
  }();
  return runnable;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

namespace {

constexpr CpuFeature kAllFeatures[] = {CpuFeature::avx512_vnni};

// QKV_DISABLE=avx512_vnni (a comma-separated list) turns features off, so
// that a benchmark compares the same path with and without them; a name
// it does not know is an error, as QKV_ISA's is.
bool disabled(CpuFeature f) {
  const char* env = std::getenv("QKV_DISABLE");
  if (!env || !*env) return false;
  bool off = false;
  const std::string list = env;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, end - at);
    bool known = false;
    for (CpuFeature g : kAllFeatures) {
      known = known || name == feature_name(g);
      off = off || (name == feature_name(g) && g == f);
    }
    if (!known)
      throw Error("QKV_DISABLE: expected a comma-separated list of avx512_vnni, found '" + name + "' in '" + list + "'");
    at = end + 1;
  }
  return off;
}

}  // namespace

const char* feature_name(CpuFeature f) {
  switch (f) {
    case CpuFeature::avx512_vnni: return "avx512_vnni";
  }
  return "?";
}

bool cpu_has(CpuFeature f) {
  switch (f) {
    case CpuFeature::avx512_vnni: {
      // Read once: CPUID traps to the hypervisor in a VM, and the quantized
      // products ask on every call.
      // QKV_DISABLE first: a bad name is an error on every CPU.
      static const bool has = !disabled(f) && cpu_can_run(Isa::avx512) && cpuid_avx512_vnni();
      return has;
    }
  }
  return false;
}

std::optional<Isa> parse_isa(const std::string& s) {
  for (Isa isa : kAllIsas)
    if (s == isa_name(isa)) return isa;
  return std::nullopt;
}

Isa detected_isa() {
  return available_isas().back();
}

void set_isa(Isa isa) {
  if (!cpu_can_run(isa))
    throw Error(std::string("isa: this CPU cannot run the ") + isa_name(isa) + " path (best: " +
                isa_name(detected_isa()) + ")");
  g_forced = static_cast<int>(isa);
}

Isa active_isa() {
  if (int f = g_forced.load(); f >= 0) return static_cast<Isa>(f);
  // Read once: the environment does not change under a running program.
  static const Isa from_env = [] {
    const char* env = std::getenv("QKV_ISA");
    if (!env || !*env) return detected_isa();
    const auto isa = parse_isa(env);
    if (!isa)
      throw Error("QKV_ISA: expected " + isa_choices() + ", found '" + env + "'");
    if (!cpu_can_run(*isa))
      throw Error(std::string("QKV_ISA: this CPU cannot run the ") + env + " path");
    return *isa;
  }();
  return from_env;
}

int default_threads() { return omp_get_max_threads(); }

namespace {

// Read once: sysconf reads /sys for it (tens of microseconds here), and
// every attention call and ThreadScope checks its thread count against it.
int machine_cores() {
  static const int cores = [] {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }();
  return cores;
}

}  // namespace

int max_threads() { return 4 * machine_cores(); }

int physical_cores() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) return default_threads();
  static const int cores = [] {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return default_threads();
    // A core is named by the first CPU of its list of hardware threads
    // ("0,64" or "0-1"); CPUs whose topology cannot be read count alone.
    std::set<int> cores;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &mask)) continue;
      std::ifstream list("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
      int first = cpu;
      if (!(list >> first)) first = cpu;
      cores.insert(first);
    }
    return cores.empty() ? default_threads() : static_cast<int>(cores.size());
  }();
  return cores;
}

void check_threads(int64_t threads, const std::string& what) {
  if (threads < 0 || threads > max_threads())
    throw Error(what + ": expected an integer from 0 (all cores) to " + std::to_string(max_threads()) +
                " (4 x this machine's " + std::to_string(machine_cores()) + " cores), found '" +
                std::to_string(threads) + "'");
}

double machine_memory_bytes() {
  // Read once, as machine_cores(): every attention call checks its results' size.
  static const double bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
  }();
  return bytes;
}

std::string memory_shortfall(const std::string& what, double bytes) {
  const double have = machine_memory_bytes();
  if (have <= 0.0 || bytes <= have) return "";
  char buf[160];
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::snprintf(buf, sizeof buf, " would take %.4g GiB, more than this machine's %.1f GiB of memory",
                bytes / kGiB, have / kGiB);
  return what + buf;
}

ThreadScope::ThreadScope(int threads) : saved_(omp_get_max_threads()) {
  check_threads(threads);
  if (threads > 0) omp_set_num_threads(threads);
}

ThreadScope::~ThreadScope() { omp_set_num_threads(saved_); }

}  // namespace qkv
