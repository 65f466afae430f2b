// gpt_quantized.cpp: a model whose matrices are quantized (Work::matsq, a
// GGUF file's weights as they are stored): taking them from a loader, and
// dequantizing them into the float32 buffer when something needs that
// (training, weights(), bf16 compute).
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <omp.h>

#include "model/gpt_work.h"
#include "qkv/error.h"
#include "qkv/gpt.h"
#include "qkv/weight.h"

namespace qkv {
namespace {

// Whether matrix i (linear_matrices' order: four a block, then the head)
// is a block's c_attn.
bool is_c_attn(const GPTConfig& c, size_t i) { return i % 4 == 0 && i < 4 * static_cast<size_t>(c.layers); }

// Whether matrix i is a c_attn whose q and k runs hold their rows in a
// GGUF llama file's order (Work::qk_paired).
template <class Work>
bool paired_matrix(const Work& W, const GPTConfig& c, size_t i) {
  return W.qk_paired && is_c_attn(c, i);
}

// Where row o of a q or k run, in transformers' order (head h's row
// part * hs/2 + i), is held in the file's order: row 2i + part of head h.
int64_t paired_row(int64_t o, int64_t hs) {
  const int64_t j = o % hs, half = hs / 2;
  return o - j + 2 * (j % half) + j / half;
}

// Rows [r0, r0 + n) of a matrix held as `runs`, dequantized at out; with
// paired_hs (the head dim), its first two runs (q and k) read in the
// file's order. Rows split between the threads.
void runs_rows(const std::vector<Weight>& runs, int64_t r0, int64_t n, float* out, int64_t paired_hs = 0) {
  for (size_t i = 0; i < runs.size() && n > 0; ++i) {
    const Weight& run = runs[i];
    if (r0 >= run.rows) {
      r0 -= run.rows;
      continue;
    }
    const int64_t k = std::min(n, run.rows - r0);
    const bool paired = paired_hs > 0 && i < 2;
#pragma omp parallel for schedule(static) if (k > 1 && !omp_in_parallel())
    for (int64_t r = r0; r < r0 + k; ++r)
      dequantize_rows(run, paired ? paired_row(r, paired_hs) : r, 1, out + (r - r0) * run.cols);
    out += k * run.cols;
    n -= k;
    r0 = 0;
  }
}

// Every row of a matrix held as `runs` at dst.
void dequantize_runs(const std::vector<Weight>& runs, float* dst, int64_t paired_hs = 0) {
  int64_t rows = 0;
  for (const Weight& run : runs) rows += run.rows;
  runs_rows(runs, 0, rows, dst, paired_hs);
}

}  // namespace

void GptLoader::hold_matrices_quantized(GPT& m, std::map<int64_t, std::vector<Weight>> runs, const Weight& wte,
                                        std::vector<uint8_t> owned, std::vector<std::shared_ptr<const void>> keep,
                                        bool qk_paired) {
  GPT::Work& W = *m.work_;
  const GPTConfig& c = m.cfg_;
  std::vector<std::vector<Weight>> mats;
  for (const MatrixPart& part : linear_matrices(W, c)) {
    std::vector<Weight>& mat = runs.at(part.offset);
    int64_t rows = 0;
    for (const Weight& run : mat) {
      if (run.cols != part.cols) throw Error("model: a quantized run's rows do not fit its matrix");
      rows += run.rows;
    }
    if (rows != part.rows) throw Error("model: the runs of a quantized matrix do not make its rows");
    if (qk_paired && is_c_attn(c, mats.size()) &&
        (!c.rope || c.head_dim() % 2 != 0 || mat.size() < 2 || mat[0].rows != c.heads * c.head_dim() ||
         mat[1].rows != c.kv_heads * c.head_dim()))
      throw Error("model: q and k rows in RoPE's pairs need RoPE, an even head dim and c_attn's q and k runs apart");
    mats.push_back(std::move(mat));
  }
  if (wte.rows != m.cfg_.vocab || wte.cols != m.cfg_.embd) throw Error("model: the quantized embedding table is misshapen");
  W.matsq = std::move(mats);
  W.wteq = wte;
  W.quant_owned = std::move(owned);
  W.mapped = std::move(keep);
  W.qk_paired = qk_paired;
  written_sparsely(m.w_.data(), m.w_.size() * sizeof(float));
  m.matrices_quantized_ = true;
  m.weights_written_ = false;
}

namespace {

// Row o of a matrix (cols wide) held as `runs`, as float32 at out.
template <class E>
void row_of(const RowRuns<E>& runs, int64_t o, int64_t cols, float* out) {
  for (const RowRun<E>& run : runs) {
    if (o >= run.rows) {
      o -= run.rows;
      continue;
    }
    for (int64_t i = 0; i < cols; ++i) {
      if constexpr (std::is_same_v<E, bfloat16>) out[i] = bf16_to_float(run(o, i, cols));
      else out[i] = run(o, i, cols);
    }
    return;
  }
}

// The parameter at `offset` (rows x cols) quantized to `type` at dst: each
// thread widens chunks of its rows (GptLoader::rows_at) and quantizes them.
void quantize_param(const GPT& m, int64_t offset, int64_t rows, int64_t cols, WeightType type, uint8_t* dst) {
  constexpr int64_t kChunk = 64;  // rows widened at a time: the part lookup once for them
  const uint64_t row_bytes = weight_bytes(type, cols);
#pragma omp parallel
  {
    std::vector<float> x(static_cast<size_t>(kChunk * cols));
#pragma omp for schedule(static)
    for (int64_t o0 = 0; o0 < rows; o0 += kChunk) {
      const int64_t k = std::min(kChunk, rows - o0);
      GptLoader::rows_at(m, offset, cols, o0, k, x.data());
      for (int64_t o = 0; o < k; ++o)
        quantize_row(type, x.data() + o * cols, dst + static_cast<uint64_t>(o0 + o) * row_bytes, cols);
    }
  }
}

}  // namespace

void GptLoader::rows_at(const GPT& m, int64_t offset, int64_t cols, int64_t r0, int64_t n, float* out) {
  const GPT::Work& W = *m.work_;
  const float* flat = m.w_.data() + offset;
  if (offset == W.wte) {  // the embedding table (and a tied head): where a mapped file holds it, else the flat buffer
    if (m.matrices_quantized_) return dequantize_rows(W.wteq, r0, n, out);
    if (W.wte16) {
      std::transform(W.wte16 + r0 * cols, W.wte16 + (r0 + n) * cols, out, [](bfloat16 x) { return bf16_to_float(x); });
      return;
    }
    flat = W.wte32 ? W.wte32 : flat;
  } else if (m.matrices_quantized_ || m.matrices_in_bf16_ || m.matrices_mapped_) {
    const std::vector<MatrixPart> parts = linear_matrices(W, m.cfg_);
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].offset != offset) continue;
      if (m.matrices_quantized_)
        return runs_rows(W.matsq[i], r0, n, out, paired_matrix(W, m.cfg_, i) ? m.cfg_.head_dim() : 0);
      for (int64_t o = 0; o < n; ++o) {
        if (m.matrices_in_bf16_) row_of(W.mats16[i], r0 + o, cols, out + o * cols);
        else row_of(W.mats32[i], r0 + o, cols, out + o * cols);
      }
      return;
    }
  }
  std::copy(flat + r0 * cols, flat + (r0 + n) * cols, out);
}

void GptLoader::quantize_matrices(GPT& m, WeightType type) {
  GPT::Work& W = *m.work_;
  const GPTConfig& c = m.cfg_;
  const std::vector<MatrixPart> parts = linear_matrices(W, c);
  for (const MatrixPart& p : parts)
    if (p.cols % weight_type_info(type).block != 0)
      throw Error(std::string("quantize: ") + weight_type_info(type).name + " needs rows of a multiple of " +
                  std::to_string(weight_type_info(type).block) + " weights; a matrix of the model has rows of " +
                  std::to_string(p.cols));
  if (c.embd % weight_type_info(type).block != 0)
    throw Error("quantize: the embedding's rows of " + std::to_string(c.embd) + " are not whole blocks");
  // The bytes of every matrix (a tied head is the table's) and the table.
  std::vector<uint64_t> at;
  uint64_t total = 0;
  for (const MatrixPart& p : parts) {
    at.push_back(total);
    if (!(c.tied_head && p.offset == W.wte)) total += weight_bytes(type, p.rows * p.cols);
  }
  const uint64_t wte_at = total;
  total += weight_bytes(type, c.vocab * c.embd);
  std::vector<uint8_t> owned(total);
  for (size_t i = 0; i < parts.size(); ++i) {
    const MatrixPart& p = parts[i];
    if (c.tied_head && p.offset == W.wte) continue;  // the table's, below
    quantize_param(m, p.offset, p.rows, p.cols, type, owned.data() + at[i]);
  }
  const int64_t C = c.embd;
  quantize_param(m, W.wte, c.vocab, C, type, owned.data() + wte_at);
  std::map<int64_t, std::vector<Weight>> runs;
  const Weight wte{type, c.vocab, C, owned.data() + wte_at};
  for (size_t i = 0; i < parts.size(); ++i) {
    const MatrixPart& p = parts[i];
    runs[p.offset] = {c.tied_head && p.offset == W.wte ? wte : Weight{type, p.rows, p.cols, owned.data() + at[i]}};
  }
  // Let go of what held the matrices before.
  W.mats16.clear();
  W.weights16 = {};
  W.wte16 = nullptr;
  W.mats32.clear();
  W.panels32 = {};
  W.wte32 = nullptr;
  m.matrices_in_bf16_ = m.matrices_mapped_ = false;
  hold_matrices_quantized(m, std::move(runs), wte, std::move(owned), {});
}

template <class T>
void BasicGPT<T>::dequantize_matrices() {
  if constexpr (std::is_same_v<T, float>) {
    Work& W = *work_;
    const std::vector<MatrixPart> parts = linear_matrices(W, cfg_);
    for (size_t i = 0; i < parts.size(); ++i)
      dequantize_runs(W.matsq[i], w_.data() + parts[i].offset, paired_matrix(W, cfg_, i) ? cfg_.head_dim() : 0);
    dequantize_runs({W.wteq}, w_.data() + W.wte);
    W.matsq.clear();
    W.wteq = {};
    W.quant_owned = {};
    W.qk_paired = false;
    W.mapped.clear();
  }
  matrices_quantized_ = false;
  weights_written_ = true;
}

template void BasicGPT<float>::dequantize_matrices();
template void BasicGPT<double>::dequantize_matrices();

}  // namespace qkv
