// isa_kernels.cpp: the one map from a path to its table (core/isa_kernels.h).
#include "core/isa_kernels.h"

namespace qkv::kernels {

const IsaKernels& isa_kernels(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return isa_scalar;
    case Isa::avx2:
      return isa_avx2;
    case Isa::avx512:
      return isa_avx512;
    case Isa::avx512bf16:
      return isa_avx512bf16;
    case Isa::amx:
      return isa_amx;
  }
  return isa_scalar;
}

}  // namespace qkv::kernels
