// isa_table.cpp: the avx2 path's kernels (core/isa_kernels.h):
// 8-lane vectors with FMA; the bf16 GEMM widens its operands to float32.
// Constant data only: nothing here runs before the path is chosen.
#include "core/isa_kernels.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

constinit const IsaKernels isa_avx2{Isa::avx2, &flash_avx2, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, &fma_avx2};

}  // namespace qkv::kernels
