/// @file
/// qkv/runtime.h: which SIMD code path and how many threads the fast kernels use.
///
/// One binary carries AMX, AVX-512 (with and without AVX512-BF16), AVX2+FMA
/// and scalar code; the best one the CPU supports is picked at run time.
/// QKV_ISA=amx|avx512bf16|avx512|avx2|scalar in the environment, or set_isa(),
/// forces a path (tests run each one). From avx512 up the paths differ only
/// for bfloat16 inputs: avx512bf16 computes Q·Kᵀ and P·V (and the bf16 GEMM)
/// with vdpbf16ps, avx512 and below widen bf16 tiles to float32 first, and amx
/// is avx512bf16 with the prefill's Q·Kᵀ and P·V on AMX tiles (Intel Xeon
/// from Sapphire Rapids on; Linux 5.16+ grants the tile state on request).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "qkv/export.h"

namespace qkv {

/// In order of capability: a path runs on any CPU that runs a later one.
enum class Isa { scalar, avx2, avx512, avx512bf16, amx };

/// "scalar", "avx2", "avx512", "avx512bf16", "amx".
QKV_API const char* isa_name(Isa isa);
/// Inverse of isa_name; std::nullopt for anything else.
QKV_API std::optional<Isa> parse_isa(const std::string& s);

/// Every path this build carries, in the enum's order (scalar first, the
/// most capable last), whether or not this CPU runs it: what tests iterate,
/// so that a path the CPU lacks is reported (skipped by name), never dropped.
QKV_API std::span<const Isa> all_isas();
/// The paths of all_isas() that this CPU (and OS) runs, in the same order;
/// never empty (scalar runs anywhere). set_isa accepts exactly these.
QKV_API std::span<const Isa> available_isas();

/// The best path this CPU (and OS) supports: available_isas()'s last.
QKV_API Isa detected_isa();
/// The path the kernels use now: set_isa's, else QKV_ISA's, else detected_isa().
QKV_API Isa active_isa();
/// Forces a path; throws qkv::Error if the CPU cannot run it.
QKV_API void set_isa(Isa isa);

/// Instruction-set extensions that kernels take beside a path, where the
/// active path has the registers they need: the ISA is a set of features,
/// not only the ladder above (a CPU may have AVX512-VNNI without
/// AVX512-BF16, as Ice Lake and Cascade Lake do).
///   avx512_vnni: vpdpbusd and vpdpwssd, the quantized weights' integer dot
///                products (qkv/weight.h) from the avx512 path up.
enum class CpuFeature { avx512_vnni };

/// "avx512_vnni".
QKV_API const char* feature_name(CpuFeature f);
/// True if this CPU (and OS) has `f` (the feature's CPUID bit, with the
/// register state of the path it runs on) and QKV_DISABLE, a comma-separated
/// list of feature names in the environment, read once, does not name it.
QKV_API bool cpu_has(CpuFeature f);

/// Threads used when an option asks for 0 ("all"): the number of cores
/// OpenMP sees (OMP_NUM_THREADS is honoured), or a ThreadScope's count.
QKV_API int default_threads();

/// The physical cores this process may run on (its CPU affinity, each core's
/// hardware threads counted once), or default_threads() when OMP_NUM_THREADS
/// is set: the command line's default thread count for running a model, as
/// llama.cpp and PyTorch use the cores (a second hardware thread of a core
/// adds little to the products, which keep its vector units busy).
QKV_API int physical_cores();

/// The most threads any call accepts: 4 x the machine's online cores. More
/// only oversubscribes the cores, and far more (40000, 100000) makes the
/// OpenMP runtime abort or crash the process, so every entry (attention, the
/// model, training, the command line, Python) refuses it here.
QKV_API int max_threads();

/// Throws qkv::Error "<what>: expected an integer from 0 (all cores) to
/// max_threads() ..., found <threads>" unless 0 <= threads <= max_threads().
QKV_API void check_threads(int64_t threads, const std::string& what = "threads");

/// The machine's physical memory in bytes (sysconf), 0 when unknown.
QKV_API double machine_memory_bytes();

/// Refuses a request before any of it is allocated: when `bytes` (what `what`
/// needs, e.g. "--weights [2, 100000, 100000] float32") exceed the machine's
/// memory, returns the one-line reason ("... would take 74.5 GiB, more than this
/// machine's 23.5 GiB of memory"); otherwise "". A double, so that sizes whose
/// product overflows 64 bits are still compared correctly. The caller throws
/// UsageError when the sizes came from options, qkv::Error when from files.
QKV_API std::string memory_shortfall(const std::string& what, double bytes);

/// Runs the calling thread's OpenMP regions (attention, the layers, the GEMM,
/// the optimizer) on `threads` threads (0 = leave the count as it is: all
/// cores unless an outer scope or OMP_NUM_THREADS says otherwise) while it lives, then
/// restores the count it found. OpenMP keeps that count per calling thread,
/// so no other thread of the program is affected: the library never sets a
/// process-wide thread count. Throws qkv::Error for a count check_threads refuses.
class QKV_API ThreadScope {
 public:
  /// `threads` for this thread's OpenMP regions until the scope ends.
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

/// Lets the calling thread stop its long calls. While an InterruptScope
/// lives, the library's long loops (attention and its backward, hence the
/// model's forward, generation and training steps; the finiteness scan of
/// the inputs) call `poll` from this thread between chunks of their work, at
/// most every 100 ms and never in a call shorter than that; once it returns
/// true the call stops early (without asking it again) and throws
/// qkv::Interrupted, its outputs unspecified. `poll` must not throw (a throw counts as true). The Python
/// module polls for Ctrl-C this way; the library knows nothing of signals.
/// Scopes nest: the innermost one's poll is used.
class QKV_API InterruptScope {
 public:
  /// Makes `poll` this thread's interrupt check until the scope ends.
  explicit InterruptScope(std::function<bool()> poll);
  ~InterruptScope();  ///< restores the enclosing scope's poll
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  std::function<bool()> poll_;
  const std::function<bool()>* saved_;
};

}  // namespace qkv
