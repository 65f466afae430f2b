// scratch.h: per-thread scratch memory, allocated once and reused.
//
// On this project's machines the first touch of a fresh page costs ~15 µs,
// so kernels never allocate per call: each thread keeps one 64-byte aligned
// buffer that only grows. OpenMP's worker threads persist between parallel
// regions, so after the first call the buffers are warm.
#pragma once

#include <cstddef>

namespace qkv {

// At least `floats` floats, 64-byte aligned, owned by the calling thread and
// valid until its next call to thread_scratch. Contents are unspecified.
float* thread_scratch(size_t floats);

// A second, independent buffer of the calling thread (for data that must
// outlive a parallel region run from this thread, e.g. split-KV partials).
float* thread_scratch_outer(size_t floats);

}  // namespace qkv
