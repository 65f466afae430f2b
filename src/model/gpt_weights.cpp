// gpt_weights.cpp: the bf16 copy of a model's matrices (Work::mats16).
//
// Under bf16 compute every Linear layer's GEMM, and the head's, reads its
// weight in bf16 from this copy: rounded once from the float32 weights
// into Work::weights16 (round_matrices), or straight from a bf16
// checkpoint (GptLoader): read into weights16, or used where the file,
// mapped into memory, holds it. Then the float32 copy is made only when
// something needs it (widen_matrices).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "io/safetensors_map.h"
#include "linalg/gemm.h"
#include "model/gpt_work.h"
#include "model/layers/nn_common.h"
#include "qkv/gpt.h"

namespace qkv {

namespace {

// Work::weights16 sized for every part, and Work::mats16 one run into it
// for each; returns where each part starts. Laid out once (resizing to the
// same size keeps the buffer): a bf16 training step rounds into the same
// runs.
template <class Work>
std::vector<bfloat16*> own_matrices(Work& W, const std::vector<MatrixPart>& parts) {
  int64_t total = 0;
  for (const MatrixPart& p : parts) total += p.size();
  W.weights16.resize(static_cast<size_t>(total));
  bool laid_out = W.mats16.size() == parts.size();
  std::vector<bfloat16*> at;
  bfloat16* next = W.weights16.data();
  for (size_t i = 0; i < parts.size(); ++i) {
    at.push_back(next);
    laid_out = laid_out && W.mats16[i].size() == 1 && W.mats16[i][0].at == next;
    next += parts[i].size();
  }
  if (laid_out) return at;
  W.mats16.clear();
  for (size_t i = 0; i < parts.size(); ++i) W.mats16.push_back({{at[i], parts[i].rows}});
  return at;
}

// An element of a held matrix as float32, exactly.
float as_float(bfloat16 x) { return bf16_to_float(x); }
float as_float(float x) { return x; }

// dst [run.rows, cols] = the run's rows, each element through `convert`,
// split between the threads; a run in another layout is rearranged tile by
// tile (for_tiles).
template <class S, class D, class F>
void copy_rows(const RowRun<S>& run, int64_t cols, D* dst, F convert) {
  if (run.layout == RunLayout::out_in) {
    nn::detail::for_chunks(run.rows * cols, [&](int64_t x0, int64_t m) {
      for (int64_t x = x0; x < x0 + m; ++x) dst[x] = convert(run.at[x]);
    });
    return;
  }
  for_tiles(run.rows, cols, [&](int64_t o, int64_t i) { dst[o * cols + i] = convert(run(o, i, cols)); });
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
    const std::vector<MatrixPart> parts = linear_matrices(W, cfg_);
    const std::vector<bfloat16*> at = own_matrices(W, parts);
    for (size_t i = 0; i < parts.size(); ++i) {
      // From w_, or from the mapped float32 file's runs.
      RowRuns<float> runs = {{w_.data() + parts[i].offset, parts[i].rows}};
      if (matrices_mapped_) runs = W.mats32[i];
      bfloat16* dst = at[i];
      for (const RowRun<float>& run : runs) {
        copy_rows(run, parts[i].cols, dst, [](float x) { return bf16_from_float(x); });
        dst += run.rows * parts[i].cols;
      }
    }
    W.wte16 = nullptr;
    if (!matrices_mapped_) W.mapped.clear();  // nothing reads the files any more
  }
}

template <class T>
void BasicGPT<T>::widen_matrices() {
  if (matrices_quantized_) return dequantize_matrices();
  if (!matrices_in_bf16_ && !matrices_mapped_) return;
  if constexpr (std::is_same_v<T, float>) {
    Work& W = *work_;
    const std::vector<MatrixPart> parts = linear_matrices(W, cfg_);
    // From bf16 copies, the exact inverse of rounding (mats16 stays valid),
    // or copied from the mapped float32 file (which is then let go).
    auto fill = [&](const auto& mats, const auto* wte) {
      for (size_t i = 0; i < parts.size(); ++i) {
        float* dst = w_.data() + parts[i].offset;
        for (const auto& run : mats[i]) {
          copy_rows(run, parts[i].cols, dst, [](auto x) { return as_float(x); });
          dst += run.rows * parts[i].cols;
        }
      }
      if (wte && !(cfg_.lm_head && cfg_.tied_head)) {  // a tied head is wte, written above
        float* dst = w_.data() + W.wte;
        nn::detail::for_chunks(cfg_.vocab * cfg_.embd, [&](int64_t x0, int64_t m) {
          for (int64_t x = x0; x < x0 + m; ++x) dst[x] = as_float(wte[x]);
        });
      }
    };
    if (matrices_in_bf16_) fill(W.mats16, W.wte16);
    if (matrices_mapped_) {
      fill(W.mats32, W.wte32);
      W.mats32.clear();
      W.panels32 = {};
      W.wte32 = nullptr;
      W.mapped.clear();  // bf16 copies, if any, are the model's own (round_matrices)
    }
    W.wte16 = nullptr;  // the embedding reads the float32 table again
  }
  matrices_in_bf16_ = false;
  matrices_mapped_ = false;
}

template <class T>
int64_t BasicGPT<T>::mapped_weight_bytes() const {
  const Work& W = *work_;
  if (W.mapped.empty()) return 0;
  const std::vector<MatrixPart> parts = linear_matrices(W, cfg_);
  auto bytes = [&](size_t elem, bool mats, const void* wte) {
    int64_t n = 0;
    for (size_t i = 0; mats && i < parts.size(); ++i)
      if (!(cfg_.tied_head && parts[i].offset == W.wte && wte)) n += parts[i].size();  // counted once
    if (wte) n += cfg_.vocab * cfg_.embd;
    return n * static_cast<int64_t>(elem);
  };
  if (matrices_quantized_) return quantized_bytes(W, cfg_);
  if (matrices_mapped_) return bytes(sizeof(T), W.panels32.empty(), W.wte32);
  return bytes(sizeof(bfloat16), true, W.wte16);
}

template <class T>
int64_t BasicGPT<T>::packed_weight_bytes() const {
  const Work& W = *work_;
  if (!matrices_mapped_ || W.panels32.empty()) return 0;
  int64_t n = 0;
  for (const MatrixPart& part : linear_matrices(W, cfg_)) n += part.size();
  return n * static_cast<int64_t>(sizeof(float));
}

float* GptLoader::weights(GPT& m) { return m.w_.data(); }

std::set<int64_t> GptLoader::bf16_matrix_offsets(const GPT& m) {
  std::set<int64_t> out;
  for (const MatrixPart& part : linear_matrices(*m.work_, m.cfg_)) out.insert(part.offset);
  return out;
}

std::map<int64_t, bfloat16*> GptLoader::hold_matrices_in_bf16(GPT& m) {
  GPT::Work& W = *m.work_;
  const std::vector<MatrixPart> parts = linear_matrices(W, m.cfg_);
  const std::vector<bfloat16*> at = own_matrices(W, parts);
  written_sparsely(m.w_.data(), m.w_.size() * sizeof(float));
  std::map<int64_t, bfloat16*> where;
  for (size_t i = 0; i < parts.size(); ++i)
    if (!(m.cfg_.tied_head && parts[i].offset == W.wte)) where[parts[i].offset] = at[i];
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

template <class E>
void GptLoader::hold_matrices_mapped(GPT& m, std::map<int64_t, RowRuns<E>> runs, const E* wte,
                                     std::vector<std::shared_ptr<const void>> keep) {
  GPT::Work& W = *m.work_;
  std::vector<RowRuns<E>> mats;
  for (const MatrixPart& part : linear_matrices(W, m.cfg_)) {
    RowRuns<E>& mat = runs.at(part.offset);
    int64_t rows = 0;
    for (const RowRun<E>& run : mat) rows += run.rows;
    if (rows != part.rows) throw Error("model: the runs of a mapped matrix do not make its rows");
    mats.push_back(std::move(mat));
  }
  W.mapped = std::move(keep);
  written_sparsely(m.w_.data(), m.w_.size() * sizeof(float));
  if constexpr (std::is_same_v<E, bfloat16>) {
    W.mats16 = std::move(mats);
    W.wte16 = wte;
    m.matrices_in_bf16_ = true;
  } else {
    W.mats32 = std::move(mats);
    W.wte32 = wte;
    m.matrices_mapped_ = true;
  }
  m.weights_written_ = false;
}

void GptLoader::pack_matrices(GPT& m) {
  GPT::Work& W = *m.work_;
  if (!m.matrices_mapped_) return;
  const std::vector<MatrixPart> parts = linear_matrices(W, m.cfg_);
  int64_t total = 0;
  for (const MatrixPart& p : parts) total += linalg::panels_size(p.rows, p.cols);
  W.panels32.resize(static_cast<size_t>(total));  // zeros: the last panels' missing rows
  float* next = W.panels32.data();
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t K = parts[i].cols;
    int64_t first = 0;  // the run's first row in the matrix
    for (const RowRun<float>& run : W.mats32[i]) {
#pragma omp parallel for schedule(static)
      for (int64_t o = 0; o < run.rows; ++o)
        for (int64_t k = 0; k < K; ++k) next[kernels::panel_index(first + o, k, K)] = run(o, k, K);
      SafetensorsMapping::release_pages(run.at, static_cast<size_t>(run.rows * K) * sizeof(float));
      first += run.rows;
    }
    W.mats32[i] = {{next, parts[i].rows, RunLayout::panels}};
    next += linalg::panels_size(parts[i].rows, K);
  }
}

template void GptLoader::hold_matrices_mapped(GPT&, std::map<int64_t, RowRuns<bfloat16>>, const bfloat16*,
                                              std::vector<std::shared_ptr<const void>>);
template void GptLoader::hold_matrices_mapped(GPT&, std::map<int64_t, RowRuns<float>>, const float*,
                                              std::vector<std::shared_ptr<const void>>);

template void BasicGPT<float>::round_matrices();
template void BasicGPT<double>::round_matrices();
template void BasicGPT<float>::widen_matrices();
template int64_t BasicGPT<float>::mapped_weight_bytes() const;
template int64_t BasicGPT<double>::mapped_weight_bytes() const;
template int64_t BasicGPT<float>::packed_weight_bytes() const;
template int64_t BasicGPT<double>::packed_weight_bytes() const;
template void BasicGPT<double>::widen_matrices();

}  // namespace qkv
