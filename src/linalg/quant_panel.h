// linalg/quant_panel.h: a prompt's products with quantized weights, as
// panels.
//
// A panel is kPanelCols weight rows repacked so that one 512-bit register
// holds four consecutive weights of each of its 16 rows, one row an int32
// lane, as unsigned bytes (the type's offset added: 128 for Q8_0, 8 for
// Q4_0, 32 for Q6_K; Q4_K's and Q5_K's are unsigned already). vpdpbusd
// then multiplies them by four int8s of x broadcast to every lane: 64
// products a step, each lane's sum one row's, with no horizontal sum and
// one float conversion a block (or sub-block) for 16 rows rather than one
// a row. A thread packs each panel once and runs every row of x against it
// while it sits in L2, so a prompt's rows pay for the unpacking once.
//
// Panel layout (K / B blocks of B = 32 or 256 weights; "group" g holds
// weights 4g .. 4g + 3 of a block, 64 bytes: row c's four at 4c):
//   Q8_0, Q4_0: per block, 8 groups, then 16 float32 d (576 bytes);
//   Q4_K, Q5_K: per block, 64 groups, then per sub-block of 32 j the rows'
//     d sc_j, then their dmin m_j (16 floats each; 5120 bytes);
//   Q6_K: per block, 64 groups, then per sub-block of 16 j the rows'
//     d sc_j (5120 bytes).
// Each output's operations are the same for any number of rows of x a call
// and any thread count, so its bits are too; the integer sums are exact,
// the float ones within weight.h's bound.
#pragma once

#include <cstdint>

#include "linalg/quant_dot.h"

namespace qkv::linalg {

constexpr int kPanelCols = 16;   // weight rows a panel holds
constexpr int kPanelRowsX = 4;   // rows of x a call of a panel's dot takes

// Rows of x as the panels read them: their blocks (Q8_0's, 34 bytes each,
// or BlockQ8K), row m's at blocks + m * stride, and sums made once a call:
//   Q8_0 form: scale[m * K/32 + b], block b's d as float32, and
//     sums[m * K/32 + b], the sum of its 32 int8s;
//   Q8_K form: sums[m * K/16 + i], each 16's sum (bsums) as int32, and
//     sums32[m * K/32 + j], each 32's as float32.
struct PanelX {
  const uint8_t* blocks;
  uint64_t stride;
  const float* scale;
  const int32_t* sums;
  const float* sums32;
};

// One weight type's panels. bytes(K): a panel's size. pack: n <= 16 weight
// rows (row r's blocks at w + r * stride) into a panel, its lanes from n up
// with zero scales (their sums unused). dot: rows m .. m + rows - 1 of x (rows <= kPanelRowsX) against the
// panel: out[i * ldo + c] for c < n.
struct PanelKernels {
  int64_t (*bytes)(int64_t K);
  void (*pack)(const uint8_t* w, uint64_t stride, int n, int64_t K, uint8_t* panel);
  void (*dot)(const uint8_t* panel, const PanelX& x, int64_t m, int rows, int64_t K, float* out, int64_t ldo, int n);
};

// kernels/quant_panel_avx512vnni.cpp
extern const PanelKernels panel_q8_0_avx512vnni, panel_q4_0_avx512vnni, panel_q4_k_avx512vnni, panel_q5_k_avx512vnni,
    panel_q6_k_avx512vnni;

// The sums of PanelX for row m of x, from its quantized blocks.
void panel_sums_q8_0(const uint8_t* blocks, int64_t K, float* scale, int32_t* sums);
void panel_sums_q8_k(const BlockQ8K* blocks, int64_t K, int32_t* sums, float* sums32);

}  // namespace qkv::linalg
