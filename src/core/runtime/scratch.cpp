#include "core/runtime/scratch.h"

#include <cstdlib>
#include <cstring>
#include <new>

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
    if (!p) throw std::bad_alloc();
    std::free(data);
    data = p;
    capacity = bytes / sizeof(float);
    return data;
  }
};

thread_local Buffer t_inner;
thread_local Buffer t_outer;

}  // namespace

float* thread_scratch(size_t floats) { return t_inner.get(floats); }
float* thread_scratch_outer(size_t floats) { return t_outer.get(floats); }

}  // namespace qkv
