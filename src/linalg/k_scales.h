// linalg/k_scales.h: the 6-bit scales and mins of Q4_K and Q5_K blocks,
// read by their dequantizers and their dot products alike.
#pragma once

#include <cstdint>

namespace qkv::linalg {

// Q4_K's and Q5_K's 12 bytes of scales: 8 sub-blocks, each a 6-bit scale sc
// and a 6-bit min m. Sub-blocks 0-3 keep theirs in the low 6 bits of bytes
// 0-3 (sc) and 4-7 (m); sub-blocks 4-7 keep their low 4 bits in the nibbles
// of bytes 8-11 (sc low, m high) and their top 2 bits in the top 2 bits of
// bytes 0-3 (sc) and 4-7 (m):
//   byte  0-3: ss SSSSSS    S: sc of sub-block j,   s: top of sc of j + 4
//   byte  4-7: mm MMMMMM    M: m of sub-block j,    m: top of m of j + 4
//   byte 8-11: mmmm ssss    the low 4 bits of m and sc of sub-block j + 4
struct ScaleMin {
  int sc, m;
};
inline ScaleMin scale_min(const uint8_t* s, int j) {
  if (j < 4) return {s[j] & 63, s[j + 4] & 63};
  return {(s[j + 4] & 15) | (s[j - 4] >> 6) << 4, (s[j + 4] >> 4) | (s[j] >> 6) << 4};
}

}  // namespace qkv::linalg
