// demo_lesson.h: what the parts of `qkv demo` share. Lesson 2 ("Self-attention
// from scratch") is one script with one generator, default_rng(42): section
// 2.3 draws where 2.2 stopped and 2.5 where 2.3 stopped, so every part runs in
// order, printing or not, and the state below carries over between them.
#pragma once

#include <string>
#include <vector>

#include "demo_print.h"
#include "qkv/rng.h"
#include "qkv/tensor.h"

namespace qkv::cli::demo {

struct Lesson2 {
  NumpyGenerator rng{42};
  std::vector<std::string> tokens;  // "the cat sat down"
  Tensor X;                         // [4, 4] the lesson's embeddings
  Tensor W_q, W_k, W_v;             // [4, 3] the first three draws of default_rng(42)
  Tensor Q, K, V;                   // [4, 3]
  Tensor scaled;                    // [4, 4] Q Kᵀ / √3
  Tensor weights;                   // [4, 4] softmax(scaled)
};

// The lesson's X for "the cat sat down": d_model = 4.
Tensor lesson2_x();

// Practice task 1: d_k = 16 and no scaling; how peaked the rows get.
void practice_unscaled(const Lesson2& l, const Printer& p);
// Practice task 2: a padding mask that keeps every token off two <pad> keys.
void practice_padding(const Lesson2& l, const Printer& p);

}  // namespace qkv::cli::demo
