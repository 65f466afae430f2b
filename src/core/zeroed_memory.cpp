// zeroed_memory.cpp: memory that starts zero (qkv/tensor.h): a Tensor's
// buffer and a model's weights (alloc_zeroed). A large block is fresh
// pages, which cost nothing until written: a KV cache sized for the whole
// context costs only the positions used, and a checkpoint's worth of memory
// is not hundreds of thousands of 4 KiB page faults up front, each costing
// microseconds on a virtual machine. Mapped in 2 MiB pages where the kernel
// gives them (transparent huge pages on madvise): attention streams K and
// V once per call, and with 4 KiB pages the page walks, not DRAM, limited
// decode's bandwidth.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "core/zeroed_memory.h"
#include "qkv/tensor.h"

namespace qkv {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
// From here on a block is mapped on its own; below, the heap's.
constexpr size_t kMapAtLeast = size_t{32} << 20;
size_t mapped_bytes(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// Fresh pages for `bytes`, 2 MiB aligned: mapped with one huge page to
// spare and trimmed to a 2 MiB boundary, so that huge pages can back all
// of it.
void* map_zeroed(size_t bytes, int flags) {
#ifdef __linux__
  const size_t len = mapped_bytes(bytes), span = len + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  if (const size_t tail = start + span - (aligned + len)) munmap(reinterpret_cast<void*>(aligned + len), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, len, MADV_HUGEPAGE);  // advice: without it (or huge pages) the memory is the same
  return p;
#else
  (void)flags;
  if (void* p = std::calloc(bytes, 1)) return p;
  throw std::bad_alloc();
#endif
}

void unmap(void* p, size_t bytes) noexcept {
#ifdef __linux__
  munmap(p, mapped_bytes(bytes));
#else
  (void)bytes;
  std::free(p);
#endif
}

// `bytes` of zeros: fresh pages from kMapAtLeast (with mmap's `flags`),
// else the heap's, 64-byte aligned (2 MiB from 2 MiB, to let huge pages
// back it) and cleared.
void* zeroed(size_t bytes, int flags) {
  if (bytes >= kMapAtLeast) return map_zeroed(bytes, flags);
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  void* p = std::aligned_alloc(align, (std::max<size_t>(bytes, 1) + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
#ifdef __linux__
  if (align == kHugePage) madvise(p, mapped_bytes(bytes), MADV_HUGEPAGE);  // advice, as above
#endif
  std::memset(p, 0, bytes);
  return p;
}

#ifdef __linux__
constexpr int kNoReserve = MAP_NORESERVE;
#else
constexpr int kNoReserve = 0;
#endif
}  // namespace

void* alloc_zeroed(size_t bytes) {
  // No swap is reserved for a large block (MAP_NORESERVE): a quantized or
  // mapped model writes only its norms and biases here, and an 8B model's
  // 32 GB of float32 room must not be refused up front on a machine of
  // 24 GB for pages it never touches.
  return zeroed(bytes, kNoReserve);
}

void free_zeroed(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes >= kMapAtLeast)
    unmap(p, bytes);
  else
    std::free(p);
}

void written_sparsely(void* p, size_t bytes) noexcept {
#ifdef __linux__
  if (bytes >= kMapAtLeast) madvise(p, mapped_bytes(bytes), MADV_NOHUGEPAGE);  // advice, as above
#else
  (void)p, (void)bytes;
#endif
}

namespace detail {

// A tensor's memory is reserved as usual: a tensor larger than the machine
// is refused at once rather than killed when written.
void* storage_alloc(size_t bytes) { return zeroed(bytes, 0); }
void storage_free(void* p, size_t bytes) noexcept { free_zeroed(p, bytes); }

}  // namespace detail
}  // namespace qkv
