// isa_table.cpp: the avx512 path's kernels (core/isa_kernels.h):
// 16-lane vectors; the bf16 GEMM widens its operands to float32.
// Constant data only: nothing here runs before the path is chosen.
#include "core/isa_kernels.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

constinit const IsaKernels isa_avx512{Isa::avx512, &flash_avx512, nullptr, nullptr, nullptr,
                                      nullptr, &gemm_dot_avx512, &fma_avx512};

}  // namespace qkv::kernels
