// isa_table.cpp: the avx512bf16 path's kernels (core/isa_kernels.h):
// avx512's float32 kernels; the bf16 GEMM on vdpbf16ps pairs.
// Constant data only: nothing here runs before the path is chosen.
#include "core/isa_kernels.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

constinit const FlashBf16Kernels flash_avx512bf16{
    qk_bf16_avx512,     qk_rows_bf16_avx512, pv_rows_bf16_avx512,
    pack_p_bf16_avx512, softmax_pairs_bf16_avx512, pack_v_bf16_avx512,
    pv_bf16_avx512,     mac_pairs_bf16_avx512, round_rows_bf16_avx512};

constinit const IsaKernels isa_avx512bf16{Isa::avx512bf16, &flash_avx512, &flash_avx512bf16,
                                          nullptr, &bf16gemm::pair_gemm_avx512bf16, nullptr,
                                          &gemm_dot_avx512bf16, &fma_avx512};

}  // namespace qkv::kernels
