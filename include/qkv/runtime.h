// qkv/runtime.h: which SIMD code path and how many threads the fast kernels use.
//
// One binary carries AMX, AVX-512 (with and without AVX512-BF16), AVX2+FMA
// and scalar code; the best one the CPU supports is picked at run time.
// QKV_ISA=amx|avx512bf16|avx512|avx2|scalar in the environment, or set_isa(),
// forces a path (tests run each one). From avx512 up the paths differ only
// for bfloat16 inputs: avx512bf16 computes Q·Kᵀ and P·V (and the bf16 GEMM)
// with vdpbf16ps, avx512 and below widen bf16 tiles to float32 first, and amx
// is avx512bf16 with the prefill's Q·Kᵀ and P·V on AMX tiles (Intel Xeon
// from Sapphire Rapids on; Linux 5.16+ grants the tile state on request).
#pragma once

#include <optional>
#include <string>

#include "qkv/export.h"

namespace qkv {

// In order of capability: a path runs on any CPU that runs a later one.
enum class Isa { scalar, avx2, avx512, avx512bf16, amx };

// "scalar", "avx2", "avx512", "avx512bf16", "amx".
QKV_API const char* isa_name(Isa isa);
QKV_API std::optional<Isa> parse_isa(const std::string& s);

// The best path this CPU (and OS) supports.
QKV_API Isa detected_isa();
// The path the kernels use now: set_isa's, else QKV_ISA's, else detected_isa().
QKV_API Isa active_isa();
// Forces a path; throws qkv::Error if the CPU cannot run it.
QKV_API void set_isa(Isa isa);

// Threads used when an option asks for 0 ("all"): the number of cores
// OpenMP sees (OMP_NUM_THREADS is honoured), or a ThreadScope's count.
QKV_API int default_threads();

// Runs the calling thread's OpenMP regions (attention, the layers, the GEMM,
// the optimizer) on `threads` threads (0 = leave the count as it is: all
// cores unless an outer scope or OMP_NUM_THREADS says otherwise) while it lives, then
// restores the count it found. OpenMP keeps that count per calling thread,
// so no other thread of the program is affected: the library never sets a
// process-wide thread count. Throws qkv::Error for a negative count.
class QKV_API ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

}  // namespace qkv
