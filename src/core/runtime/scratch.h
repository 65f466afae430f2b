// scratch.h: scratch memory for the kernels, allocated once and reused.
//
// On this project's machines the first touch of a fresh page costs ~15 µs,
// so kernels never allocate per call: each calling thread keeps buffers that
// only grow, and after the first call their pages are warm.
//
// Nothing inside an OpenMP region may throw (an exception escaping a
// parallel region terminates the process), so all scratch a region needs is
// sized before it starts: TeamScratch carves one buffer of the calling
// thread into a slice per team thread, and running out of memory is a
// qkv::Error at the call, with the size named.
#pragma once

#include <cstddef>

namespace qkv {

class TeamScratch {
 public:
  // `threads` slices of at least `floats` floats each, 64-byte aligned.
  // Throws qkv::Error if the memory cannot be had. Valid until the calling
  // thread constructs its next TeamScratch.
  TeamScratch(int threads, size_t floats);
  // The slice of the OpenMP thread calling it (omp_get_thread_num()).
  float* slot() const;

 private:
  float* base_;
  size_t stride_;  // floats per slice, a whole number of cache lines
};

// A buffer of the calling thread, outside any parallel region, for data that
// a region's threads share (e.g. split-KV partials): at least `floats`
// floats, valid until this thread's next call. Throws qkv::Error on failure.
float* caller_scratch(size_t floats);

}  // namespace qkv
