// flash_avx512.cpp: the micro-kernels on 16-lane AVX-512 vectors. Compiled
// with -mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma (CMakeLists.txt) and
// only ever called after qkv::active_isa() said the CPU has them.
#include <algorithm>
#include <cstdint>

#include "core/kernels/avx512/vec_avx512.h"
#include "core/kernels/flash_kernels.h"
#include "core/kernels/softmax_column.h"

namespace qkv::kernels {
namespace {

#include "core/kernels/flash_simd.inc"

}  // namespace

constinit const FlashKernels flash_avx512{qk, qk_rows, softmax, pv, weights,
                                   probs, dscores, mac, widen_bf16, check_scores};

}  // namespace qkv::kernels
