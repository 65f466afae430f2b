// linalg/rows.h: the reference row functions of the quantized types, for
// the table in weight_types.cpp. Each takes n weights, a multiple of its
// block (checked by the caller), and blocks at any byte address.
#pragma once

#include <cstdint>

namespace qkv::linalg {

// quant_32.cpp: 32-weight blocks.
void dequantize_q8_0(const void* blocks, float* out, int64_t n);
void quantize_q8_0(const float* x, void* blocks, int64_t n);
void dequantize_q4_0(const void* blocks, float* out, int64_t n);
void quantize_q4_0(const float* x, void* blocks, int64_t n);
// Q5_0's and Q5_1's 32 q (0..31) of a block: the nibbles at qs (weight j
// < 16 the low nibble of qs[j], j >= 16 the high one of qs[j - 16]) and
// the fifth bits of the little-endian word at qh (bit j, weight j's).
void unpack_q5(const uint8_t* qh, const uint8_t* qs, int* q);
void dequantize_q5_0(const void* blocks, float* out, int64_t n);
void quantize_q5_0(const float* x, void* blocks, int64_t n);
void dequantize_q5_1(const void* blocks, float* out, int64_t n);
void quantize_q5_1(const float* x, void* blocks, int64_t n);

// quant_k.cpp: 256-weight super-blocks.
void dequantize_q4_k(const void* blocks, float* out, int64_t n);
void dequantize_q5_k(const void* blocks, float* out, int64_t n);
void dequantize_q6_k(const void* blocks, float* out, int64_t n);

// quant_k_make.cpp: ggml's reference K-quant quantizers.
void quantize_q4_k(const float* x, void* blocks, int64_t n);
void quantize_q5_k(const float* x, void* blocks, int64_t n);
void quantize_q6_k(const float* x, void* blocks, int64_t n);

}  // namespace qkv::linalg
