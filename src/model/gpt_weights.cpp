// gpt_weights.cpp: the bf16 copy of a model's matrices (Work::weights16).
//
// Under bf16 compute every Linear layer's GEMM, and the head's, reads its
// weight in bf16 from this copy: rounded once from the float32 weights
// (round_matrices), or read straight from a bf16 checkpoint (GptLoader),
// in which case the float32 copy is made only when something needs it
// (widen_matrices).
#include <cstdint>
#include <map>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/gpt_work.h"
#include "model/layers/nn_common.h"
#include "qkv/gpt.h"

namespace qkv {

namespace {

// The matrices Work::weights16 holds, in its order: each block's four Linear
// weights, then the head's matrix (wte when tied) as (offset in the flat
// buffer, elements).
template <class Work>
std::vector<std::pair<int64_t, int64_t>> bf16_matrices(const Work& W, const GPTConfig& cfg) {
  const int64_t C = cfg.embd, F = cfg.ffn_dim(), fc_out = fc_width(cfg);
  const int64_t qkv_out = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim();
  std::vector<std::pair<int64_t, int64_t>> parts;
  for (const auto& L : W.layer)
    parts.insert(parts.end(), {{L.attn_w, qkv_out * C}, {L.attn_proj_w, C * C}, {L.fc_w, fc_out * C},
                               {L.fc_proj_w, C * F}});
  if (cfg.lm_head) parts.emplace_back(cfg.tied_head ? W.wte : W.lm_head, cfg.vocab * C);
  return parts;
}

}  // namespace

// Work::weights16 from the float32 weights, rounded to nearest even, in
// chunks split between the threads. The head is the largest matrix a
// decode step reads (GPT-2's: 38.6M weights): rounding it there on every
// step cost more than the step's products.
template <class T>
void BasicGPT<T>::round_matrices() {
  if constexpr (std::is_same_v<T, float>) {
    Work& W = *work_;
    const std::vector<std::pair<int64_t, int64_t>> parts = bf16_matrices(W, cfg_);
    int64_t total = 0;
    for (const auto& p : parts) total += p.second;
    W.weights16.resize(static_cast<size_t>(total));
    bfloat16* dst = W.weights16.data();
    for (const auto& part : parts) {
      const float* src = w_.data() + part.first;  // no lambda captures a structured binding (clang 14)
      nn::detail::for_chunks(part.second, [&](int64_t i, int64_t m) {
        for (int64_t x = i; x < i + m; ++x) dst[x] = bf16_from_float(src[x]);
      });
      dst += part.second;
    }
  }
}

template <class T>
void BasicGPT<T>::widen_matrices() {
  if (!matrices_in_bf16_) return;
  if constexpr (std::is_same_v<T, float>) {
    // The exact inverse of round_matrices: weights16 stays valid.
    const bfloat16* src = work_->weights16.data();
    for (const auto& part : bf16_matrices(*work_, cfg_)) {
      float* dst = w_.data() + part.first;
      nn::detail::for_chunks(part.second, [&](int64_t i, int64_t m) {
        for (int64_t x = i; x < i + m; ++x) dst[x] = bf16_to_float(src[x]);
      });
      src += part.second;
    }
  }
  matrices_in_bf16_ = false;
}

float* GptLoader::weights(GPT& m) { return m.w_.data(); }

std::set<int64_t> GptLoader::bf16_matrix_offsets(const GPT& m) {
  std::set<int64_t> out;
  for (const auto& part : bf16_matrices(*m.work_, m.cfg_)) out.insert(part.first);
  return out;
}

std::map<int64_t, bfloat16*> GptLoader::hold_matrices_in_bf16(GPT& m) {
  GPT::Work& W = *m.work_;
  const auto parts = bf16_matrices(W, m.cfg_);
  int64_t total = 0;
  for (const auto& p : parts) total += p.second;
  W.weights16.resize(static_cast<size_t>(total));
  std::map<int64_t, bfloat16*> where;
  bfloat16* at = W.weights16.data();
  for (const auto& [offset, n] : parts) {
    if (!(m.cfg_.tied_head && offset == W.wte)) where[offset] = at;
    at += n;
  }
  m.matrices_in_bf16_ = true;
  m.weights_written_ = false;
  return where;
}

void GptLoader::held_matrices_read(GPT& m) {
  GPT::Work& W = *m.work_;
  if (!m.matrices_in_bf16_ || !m.cfg_.lm_head || !m.cfg_.tied_head) return;
  const int64_t n = m.cfg_.vocab * m.cfg_.embd;
  bfloat16* dst = W.weights16.data() + (W.weights16.size() - static_cast<size_t>(n));  // the head comes last
  const float* src = m.w_.data() + W.wte;
  nn::detail::for_chunks(n, [&](int64_t i, int64_t k) {
    for (int64_t x = i; x < i + k; ++x) dst[x] = bf16_from_float(src[x]);
  });
}


template void BasicGPT<float>::round_matrices();
template void BasicGPT<double>::round_matrices();
template void BasicGPT<float>::widen_matrices();
template void BasicGPT<double>::widen_matrices();

}  // namespace qkv
