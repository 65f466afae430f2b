#include "core/runtime/scratch.h"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "qkv/error.h"

namespace qkv {
namespace {

struct Buffer {
  float* data = nullptr;
  size_t capacity = 0;  // floats
  ~Buffer() { std::free(data); }

  float* get(size_t floats) {
    if (floats <= capacity) return data;
    // Grow by at least half again, so a slowly rising size does not
    // reallocate (and re-fault fresh pages) on every call.
    size_t want = capacity + capacity / 2;
    if (want < floats) want = floats;
    const size_t bytes = (want * sizeof(float) + 63) / 64 * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!p)
      throw Error("out of memory: the attention kernels' scratch needs " +
                  std::to_string(floats * sizeof(float) >> 20) + " MiB");
    std::free(data);
    data = p;
    capacity = bytes / sizeof(float);
    return data;
  }
};

thread_local Buffer t_team;
thread_local Buffer t_caller;

}  // namespace

TeamScratch::TeamScratch(int threads, size_t floats)
    : base_(nullptr), stride_((floats + 15) / 16 * 16) {
  base_ = t_team.get(stride_ * static_cast<size_t>(threads < 1 ? 1 : threads));
}

float* TeamScratch::slot() const {
  return base_ + stride_ * static_cast<size_t>(omp_get_thread_num());
}

float* caller_scratch(size_t floats) { return t_caller.get(floats); }

}  // namespace qkv
