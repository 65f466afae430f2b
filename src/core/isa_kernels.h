// isa_kernels.h: what differs between the SIMD paths (qkv/runtime.h), as one
// table of kernels per path. Each path is a folder, src/core/kernels/<isa>/,
// compiled with that path's flags (QKV_ISA_FLAGS_<isa> in CMakeLists.txt),
// whose isa_table.cpp defines its IsaKernels; isa_kernels() is the one place
// that maps an Isa to its table. Callers read the table of active_isa() and
// branch on which kernels it has, never on the Isa itself. A null pointer
// means the path has no such kernels.
#pragma once

#include "core/fma_probe.h"
#include "core/gemm_bf16_kernels.h"
#include "core/gemm_dot_kernels.h"
#include "qkv/runtime.h"

namespace qkv::kernels {

// The attention's micro-kernels: float32 (core/kernels/flash_kernels.h),
// bf16 pairs on vdpbf16ps (flash_bf16.h) and AMX tiles (flash_amx.h); only
// the attention includes those headers.
struct FlashKernels;
struct FlashBf16Kernels;
struct FlashAmxKernels;

struct IsaKernels {
  Isa isa;
  // The attention's forward and backward on float32 tiles (bf16 K and V
  // widened to float32 where vdpbf16ps is not there): every path.
  const FlashKernels* flash;
  // The attention's bf16 products on vdpbf16ps pairs, forward and backward:
  // from avx512bf16 up; null below (bf16 tiles widened, the backward refused).
  const FlashBf16Kernels* flash_bf16;
  // The bf16 prefill's Q·Kᵀ and P·V on AMX tiles: amx only.
  const FlashAmxKernels* flash_amx;
  // gemm_bf16's packing into bf16 pairs and micro-tile on vdpbf16ps: from
  // avx512bf16 up; null below (gemm_bf16 widens and calls sgemm).
  const bf16gemm::PairGemmKernels* gemm_pairs;
  // gemm_bf16's blocks on AMX tiles: amx only.
  const bf16gemm::AmxGemmKernels* gemm_amx;
  // The dot-product GEMM for few rows (sgemm's, and the bf16 weights'
  // products): float32 from avx512 up, bf16 from avx512bf16 up; null below
  // (sgemm runs oneDNN).
  const GemmDotKernels* gemm_dot;
  // measure_fma_gflops's block of float32 FMA chains (qkv/peak.h): every path.
  const FmaProbe* fma;
};

// Each path's table, defined by its folder's isa_table.cpp; read them
// through isa_kernels().
extern const IsaKernels isa_scalar, isa_avx2, isa_avx512, isa_avx512bf16, isa_amx;

}  // namespace qkv::kernels

namespace qkv {

// The table of `isa`'s path (whether or not this CPU runs it: a caller runs
// only active_isa()'s). Not installed, but exported (QKV_API) from
// libqkv_core.so, outside the kernels namespace the export check keeps
// private: the bf16 GEMM (qkv::model) and the FMA peak probe (the CLI's
// support library) read the tables from above core.
QKV_API const kernels::IsaKernels& isa_kernels(Isa isa);

namespace kernels {
using qkv::isa_kernels;
}  // namespace kernels

}  // namespace qkv
