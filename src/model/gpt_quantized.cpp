// gpt_quantized.cpp: a model whose matrices are quantized (Work::matsq, a
// GGUF file's weights as they are stored): taking them from a loader, and
// dequantizing them into the float32 buffer when something needs that
// (training, weights(), bf16 compute).
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/gpt_work.h"
#include "qkv/error.h"
#include "qkv/gpt.h"
#include "qkv/weight.h"

namespace qkv {
namespace {

// dst [rows, cols] from the runs' rows, dequantized, rows split between
// the threads.
void dequantize_runs(const std::vector<Weight>& runs, float* dst) {
  for (const Weight& run : runs) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < run.rows; ++r) dequantize_row(run.type, run.row(r), dst + r * run.cols, run.cols);
    dst += run.rows * run.cols;
  }
}

}  // namespace

void GptLoader::hold_matrices_quantized(GPT& m, std::map<int64_t, std::vector<Weight>> runs, const Weight& wte,
                                        std::vector<uint8_t> owned, std::vector<std::shared_ptr<const void>> keep) {
  GPT::Work& W = *m.work_;
  std::vector<std::vector<Weight>> mats;
  for (const MatrixPart& part : linear_matrices(W, m.cfg_)) {
    std::vector<Weight>& mat = runs.at(part.offset);
    int64_t rows = 0;
    for (const Weight& run : mat) {
      if (run.cols != part.cols) throw Error("model: a quantized run's rows do not fit its matrix");
      rows += run.rows;
    }
    if (rows != part.rows) throw Error("model: the runs of a quantized matrix do not make its rows");
    mats.push_back(std::move(mat));
  }
  if (wte.rows != m.cfg_.vocab || wte.cols != m.cfg_.embd) throw Error("model: the quantized embedding table is misshapen");
  W.matsq = std::move(mats);
  W.wteq = wte;
  W.quant_owned = std::move(owned);
  W.mapped = std::move(keep);
  written_sparsely(m.w_.data(), m.w_.size() * sizeof(float));
  m.matrices_quantized_ = true;
  m.weights_written_ = false;
}

template <class T>
void BasicGPT<T>::dequantize_matrices() {
  if constexpr (std::is_same_v<T, float>) {
    Work& W = *work_;
    const std::vector<MatrixPart> parts = linear_matrices(W, cfg_);
    for (size_t i = 0; i < parts.size(); ++i) dequantize_runs(W.matsq[i], w_.data() + parts[i].offset);
    dequantize_runs({W.wteq}, w_.data() + W.wte);
    W.matsq.clear();
    W.wteq = {};
    W.quant_owned = {};
    W.mapped.clear();
  }
  matrices_quantized_ = false;
  weights_written_ = true;
}

template void BasicGPT<float>::dequantize_matrices();
template void BasicGPT<double>::dequantize_matrices();

}  // namespace qkv
