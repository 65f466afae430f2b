// alloc_zeroed.cpp: the memory a model's weights live in (qkv/gpt.h,
// ZeroedAllocator). A checkpoint's worth of fresh memory is
// hundreds of thousands of 4 KiB page faults, each costing microseconds on
// a virtual machine: mapped in 2 MiB pages where the kernel gives them
// (transparent huge pages on madvise), the same memory loads in a fraction
// of the time; and it is zero, so what is never written is never touched.
#include <cstdint>
#include <cstdlib>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "qkv/gpt.h"

namespace qkv {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
// Below this, calloc (whose large blocks are fresh zero pages too).
constexpr size_t kMapAtLeast = size_t{32} << 20;
size_t mapped_bytes(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
}  // namespace

void* alloc_zeroed(size_t bytes) {
#ifdef __linux__
  if (bytes >= kMapAtLeast) {
    // Mapped with one huge page to spare, trimmed to a 2 MiB boundary, so
    // that transparent huge pages can back all of it. No swap is reserved
    // for it (MAP_NORESERVE): a quantized or mapped model writes only its
    // norms and biases here, and an 8B model's 32 GB of float32 room must
    // not be refused up front on a machine of 24 GB for pages it never
    // touches.
    const size_t len = mapped_bytes(bytes), span = len + kHugePage;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > start) munmap(raw, aligned - start);
    if (const size_t tail = start + span - (aligned + len)) munmap(reinterpret_cast<void*>(aligned + len), tail);
    void* p = reinterpret_cast<void*>(aligned);
    madvise(p, len, MADV_HUGEPAGE);  // advice: without it (or huge pages) the memory is the same
    return p;
  }
#endif
  if (void* p = std::calloc(bytes ? bytes : 1, 1)) return p;
  throw std::bad_alloc();
}

void written_sparsely(void* p, size_t bytes) noexcept {
#ifdef __linux__
  if (bytes >= kMapAtLeast) madvise(p, mapped_bytes(bytes), MADV_NOHUGEPAGE);  // advice, as above
#else
  (void)p, (void)bytes;
#endif
}

void free_zeroed(void* p, size_t bytes) noexcept {
  if (!p) return;
#ifdef __linux__
  if (bytes >= kMapAtLeast) {
    munmap(p, mapped_bytes(bytes));
    return;
  }
#endif
  std::free(p);
}

}  // namespace qkv
