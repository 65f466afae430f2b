// isa_table.cpp: the scalar path's kernels (core/isa_kernels.h):
// plain C++, runs anywhere.
// Constant data only: nothing here runs before the path is chosen.
#include "core/isa_kernels.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

constinit const IsaKernels isa_scalar{Isa::scalar, &flash_scalar, nullptr, nullptr, nullptr,
                                      nullptr, nullptr, &fma_scalar};

}  // namespace qkv::kernels
