// isa_table.cpp: the amx path's kernels (core/isa_kernels.h):
// avx512bf16's kernels, with the bf16 GEMM's blocks on AMX tiles.
// Constant data only: nothing here runs before the path is chosen.
#include "core/isa_kernels.h"
#include "core/kernels/flash_amx.h"
#include "core/kernels/flash_bf16.h"
#include "core/kernels/flash_kernels.h"

namespace qkv::kernels {

constinit const FlashAmxKernels flash_amx{amx_tiles_on, amx_tiles_off, qk_bf16_amx, pack_vt_bf16,
                                          pv_bf16_amx};

constinit const IsaKernels isa_amx{Isa::amx, &flash_avx512, &flash_avx512bf16, &flash_amx,
                                   &bf16gemm::pair_gemm_avx512bf16, &bf16gemm::amx_gemm,
                                   &gemm_dot_avx512bf16, &fma_avx512};

}  // namespace qkv::kernels
