// isa_table.cpp: the avx512bf16 path's kernels (core/isa_kernels.h):
// avx512's float32 kernels; the bf16 GEMM on vdpbf16ps pairs.
// Constant data only: nothing here runs before the path is chosen.
#include "core/isa_kernels.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

constinit const IsaKernels isa_avx512bf16{
    Isa::avx512bf16, &flash_avx512, &bf16gemm::pair_gemm_avx512bf16, nullptr};

}  // namespace qkv::kernels
