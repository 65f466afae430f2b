// fuzz_npy.cpp: libFuzzer target for the .npy reader (qkv::parse_npy).
//
// Any input either decodes or is refused with qkv::Error; anything else
// (another exception, a sanitizer report, a failed property) is a bug. A
// decoded array must survive a write and re-read unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "qkv/error.h"
#include "qkv/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  qkv::Tensor t;
  try {
    t = qkv::parse_npy(bytes, "fuzz.npy");
  } catch (const qkv::Error&) {
    return 0;  // refused: expected
  }
  // Property: what we decoded, npy_bytes writes and parse_npy reads back as is.
  const qkv::Tensor again = qkv::parse_npy(qkv::npy_bytes(t), "roundtrip.npy");
  if (again.dtype() != t.dtype() || again.shape() != t.shape() || again.nbytes() != t.nbytes() ||
      (t.nbytes() != 0 && std::memcmp(again.raw(), t.raw(), t.nbytes()) != 0))
    std::abort();
  return 0;
}
