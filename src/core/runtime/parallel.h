// core/runtime/parallel.h: when a loop is worth an OpenMP region.
#pragma once

#include <cstdint>

namespace qkv {

// Below this many elements (or outputs) a loop runs on the calling thread:
// an OpenMP region costs a few microseconds, about what 16k elements of a
// simple op do. The layers and the GEMMs' own loops share it.
inline constexpr int64_t kParallelMin = int64_t{1} << 14;

}  // namespace qkv
