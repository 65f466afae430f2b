// core/zeroed_memory.h: what the library's zeroed memory (qkv/tensor.h's
// alloc_zeroed) offers its own layers besides. Not installed, but exported
// (QKV_API) from libqkv_core.so: the model layer above calls it.
#pragma once

#include <cstddef>

#include "qkv/export.h"

namespace qkv {

// Memory from alloc_zeroed(bytes) of which only scattered parts will be
// written from here on (a model's float32 buffer whose matrices are held
// elsewhere: its norms and biases lie between them): backed by 4 KiB pages,
// so that each small write makes 4 KiB resident, not a 2 MiB page.
QKV_API void written_sparsely(void* p, size_t bytes) noexcept;

}  // namespace qkv
