// isa_kernels.cpp: the one map from a path to its table (core/isa_kernels.h).
#include "core/isa_kernels.h"

namespace qkv {

const kernels::IsaKernels& isa_kernels(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return kernels::isa_scalar;
    case Isa::avx2:
      return kernels::isa_avx2;
    case Isa::avx512:
      return kernels::isa_avx512;
    case Isa::avx512bf16:
      return kernels::isa_avx512bf16;
    case Isa::amx:
      return kernels::isa_amx;
  }
  return kernels::isa_scalar;
}

}  // namespace qkv
