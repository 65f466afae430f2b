// gpt_work.h: what a BasicGPT<T> keeps between calls besides its weights:
// where each block's parameters sit in the flat buffer, the activations the
// forward keeps for the backward, and the backward's scratch. Private to
// src/model (qkv/gpt.h only names it), allocated once per (B, T, compute
// dtype) and reused by every call of that shape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/gemm_dot_kernels.h"
#include "core/zeroed_memory.h"
#include "model/layers/nn_common.h"
#include "qkv/attention.h"
#include "qkv/gpt.h"
#include "qkv/nn.h"
#include "qkv/weight.h"

namespace qkv {

// c_fc's output width: the MLP's hidden width, twice that for SwiGLU (the
// gate's and the up projection's, stacked).
inline int64_t fc_width(const GPTConfig& c) { return c.swiglu ? 2 * c.ffn_dim() : c.ffn_dim(); }

// A matrix the GEMMs read ([out, in], rows of `in` elements) as runs of
// consecutive rows: one run in the model's own buffer, or one per
// checkpoint tensor where a mapped file holds them (a Llama's q, k and v
// projections are three tensors of its file, its c_attn one matrix). A run
// of a mapped file may hold its rows transposed (in_out, a GPT-2 Conv1D
// weight stored [in, out]); a float32 matrix packed at load is one run in
// panels of 48 rows (linalg/gemm.h, sgemm_panels).
enum class RunLayout : uint8_t {
  out_in,  // element (o, i) at at[o * in + i]
  in_out,  // at[i * rows + o]
  panels,  // at[kernels::panel_index(o, i, in)]: panels of 48 rows
};
template <class E>
struct RowRun {
  const E* at;
  int64_t rows;
  RunLayout layout = RunLayout::out_in;
  // Element (o, i) of the run, for a matrix whose rows hold `in` elements.
  const E& operator()(int64_t o, int64_t i, int64_t in) const {
    switch (layout) {
      case RunLayout::in_out: return at[i * rows + o];
      case RunLayout::panels: return at[kernels::panel_index(o, i, in)];
      default: return at[o * in + i];
    }
  }
};
template <class E>
using RowRuns = std::vector<RowRun<E>>;

// f(o, i) for every o < rows and i < cols, in 32 x 32 tiles split between
// the threads: a transposition's reads and writes within a tile stay in L1.
template <class F>
void for_tiles(int64_t rows, int64_t cols, F f) {
  constexpr int64_t kTile = 32;
  const int64_t tiles_o = (rows + kTile - 1) / kTile, tiles_i = (cols + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t to = 0; to < tiles_o; ++to)
    for (int64_t ti = 0; ti < tiles_i; ++ti) {
      const int64_t o1 = std::min(rows, (to + 1) * kTile), i1 = std::min(cols, (ti + 1) * kTile);
      for (int64_t o = to * kTile; o < o1; ++o)
        for (int64_t i = ti * kTile; i < i1; ++i) f(o, i);
    }
}

using Bf16Run = RowRun<bfloat16>;
using Bf16Matrix = RowRuns<bfloat16>;

template <class T>
struct BasicGPT<T>::Work {
  using Vec = std::vector<T>;

  // Offsets of one block's parameters in the flat buffer (-1: absent).
  struct Layer {
    int64_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b;
    int64_t ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
  };
  // A Linear layer's input as the layer before it stored it: float32 (x),
  // or under bf16 compute already rounded to bfloat16 (x16, x empty), which
  // the GEMM reads as it is.
  struct LinearIn {
    Vec x;
    std::vector<bfloat16> x16;
  };
  // What one block's forward keeps for its backward.
  // Under post-norm (no bf16 LinearIns: the normalised rows are also the
  // residual stream) ln1 holds ln_1(x + attention), ln2.x the MLP's sum
  // before ln_2 and res3 the block's output, ln_2 of it.
  struct LayerActs {
    LinearIn ln1;                 // [BT, C]
    Vec ln1_mean, ln1_rstd;       // [BT], [BT]
    Vec qkv;                      // [BT, (H + 2 Hkv) hs]
    Tensor q, k, v;               // [B, H|Hkv, T, hs], RoPE applied (bf16 compute: rounded);
                                  // packed rows: padded to the longest sequence
    Tensor q16, k16, v16;         // the same in bf16 (bf16 compute only)
    AttentionResult att;          // out [B, H, T, hs], lse [B, H, T]
    Vec atty, res2;               // [BT, A]: heads merged; [BT, C]: x + attention
    LinearIn ln2;
    Vec ln2_mean, ln2_rstd;
    Vec fch;                      // [BT, F] ([BT, 2F] for SwiGLU: gate, then up)
    LinearIn fch_gelu;            // [BT, F]
    Vec res3;                     // [BT, C]: the block's output
  };
  // BT below is the number of rows: B * T, or Σ lengths for packed sequences.
  struct Acts {
    int64_t B = 0, Tn = 0, rows = 0;
    DType compute = DType::f32;            // what the LinearIns hold
    std::vector<int32_t> tokens, targets;  // [BT]
    std::vector<int64_t> lengths, starts;  // packed rows: [B] each sequence's length and first row
    Vec encoded;                           // [BT, C]
    Vec emb_mean, emb_rstd;                // [BT] (ln_e)
    // Every block's, for the backward (a forward with targets) or attention
    // maps; otherwise one set, which every block reuses in turn (block l
    // reads its input, block l - 1's res3, before it writes its own): a
    // long prompt's prefill then holds one block's activations, not L.
    std::vector<LayerActs> layers;
    LinearIn lnf;                          // [BT, C]
    Vec lnf_mean, lnf_rstd;                // [BT], [BT]
    Vec probs, losses;                     // [BT, V], [BT]
  };

  // Block l's activations (the one shared set, when only one is kept).
  LayerActs& layer_acts(int64_t l) { return acts.layers[acts.layers.size() == 1 ? 0 : static_cast<size_t>(l)]; }
  // decode_batch's sequences' attention results, one each (reused).
  std::vector<AttentionResult> seq_att;
  // Set while attention_maps runs the forward: every block's q, k, v are read after it.
  bool keep_all_layers = false;

  std::vector<Layer> layer;
  int64_t wte = 0, wpe = -1, wtt = -1, lne_w = -1, lne_b = -1, lnf_w = -1, lnf_b = -1, lm_head = -1;
  // The parameters whose gradient backward() accumulates from zero: (offset, size).
  std::vector<std::pair<int64_t, int64_t>> accumulated_grads;
  nn::RopeTable rope;  // cos/sin for positions 0 .. context - 1 (cfg.rope only)

  // Under bf16 compute, each block's Linear weights rounded to bf16 once
  // (c_attn, c_proj, c_fc, mlp c_proj, block after block, each [out, in]
  // as in the flat buffer): a forward then reads half the bytes and rounds
  // nothing (gemm_bf16 gives the same bits either way). Rounded again when
  // the weights may have been written (BasicGPT::weights_written_).
  std::vector<bfloat16, ZeroedAllocator<bfloat16>> weights16;  // sized once: not written twice
  // The bf16 matrices the forward reads, in weights16's order (each block's
  // four, then the head's): runs into weights16, or into `mapped` files.
  std::vector<Bf16Matrix> mats16;
  // wte in bf16 where a mapped file holds it (its float32 copy unwritten
  // while matrices_in_bf16_): the embedding widens the rows it looks up.
  const bfloat16* wte16 = nullptr;
  // The same for a float32 checkpoint mapped as it is (matrices_mapped_):
  // the matrices, in mats16's order, and wte, read where the file holds them.
  // Or the matrices packed into panels32 at load, one run each in panels
  // (GptLoader::pack_matrices), and wte still where the file holds it.
  std::vector<RowRuns<T>> mats32;
  const T* wte32 = nullptr;
  std::vector<float, ZeroedAllocator<float>> panels32;
  // The matrices of a quantized model (matrices_quantized_), in mats16's
  // order, each as runs of Weights (qkv/weight.h) of the file's types,
  // read where the mapped file holds them or in quant_owned; wteq the
  // embedding table. With qk_paired, the q and k runs of every c_attn hold
  // each head's rows as a GGUF llama file does, RoPE's pairs adjacent
  // (gguf_names.h): the products' q and k columns are put back in halves
  // by split_qkv, and the rows in order wherever they are dequantized.
  std::vector<std::vector<Weight>> matsq;
  Weight wteq;
  std::vector<uint8_t> quant_owned;
  bool qk_paired = false;
  std::vector<std::shared_ptr<const void>> mapped;  // kept alive with the model
  Acts acts;
  Vec logits;  // [BT, V] without a cache; [V] (the last position) with one; empty without lm_head
  const T* hidden = nullptr;  // [BT, C]: the last run's final hidden states
  bool has_targets = false;
  // Backward scratch: the gradient flowing down the residual stream, and
  // the gradients of one block's intermediates (reused by every block).
  Vec dres, dln, dqkv, datty, dfch, dfch_gelu, dlogits;
  Tensor dout;
  AttentionGrads dattn;
};

// One Linear matrix of the model: its parameter's offset in the flat
// buffer, its rows and its row length.
struct MatrixPart {
  int64_t offset, rows, cols;
  int64_t size() const { return rows * cols; }
};

// The matrices in the order Work::mats16, mats32 and matsq hold them: each
// block's four Linear weights, then the head's matrix (wte when tied).
template <class Work>
std::vector<MatrixPart> linear_matrices(const Work& W, const GPTConfig& cfg) {
  const int64_t C = cfg.embd, F = cfg.ffn_dim(), fc_out = fc_width(cfg);
  const int64_t qkv_out = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim();
  std::vector<MatrixPart> parts;
  for (const auto& L : W.layer)
    parts.insert(parts.end(), {{L.attn_w, qkv_out, C}, {L.attn_proj_w, C, cfg.attn_dim()}, {L.fc_w, fc_out, C},
                               {L.fc_proj_w, C, F}});
  if (cfg.lm_head) parts.push_back({cfg.tied_head ? W.wte : W.lm_head, cfg.vocab, C});
  return parts;
}

// The bytes of a quantized model's matrices and table (matrices_quantized_),
// a tied head counted once.
template <class Work>
int64_t quantized_bytes(const Work& W, const GPTConfig& cfg) {
  uint64_t n = W.wteq.data ? W.wteq.row_bytes() * static_cast<uint64_t>(W.wteq.rows) : 0;
  for (size_t i = 0; i < W.matsq.size(); ++i)
    for (const Weight& run : W.matsq[i])
      if (!(cfg.tied_head && i + 1 == W.matsq.size() && run.data == W.wteq.data))
        n += run.row_bytes() * static_cast<uint64_t>(run.rows);
  return static_cast<int64_t>(n);
}

// What a checkpoint reader (src/model/hf) needs beyond GPT's public API:
// the flat buffer as it is (no widening, not marked written), and a model
// that holds its matrices in bf16 only, filled from a bf16 file directly.
struct GptLoader {
  // The flat buffer: zeros wherever nothing was read.
  static float* weights(GPT& m);
  // The offsets of the parameters Work::weights16 holds: the Linear
  // matrices, and the head's (wte when tied).
  static std::set<int64_t> bf16_matrix_offsets(const GPT& m);
  // Makes m hold its Linear matrices and untied head in bf16 only
  // (Work::weights16, sized here): where each one goes, by its ParamInfo
  // offset. A tied head is wte, which the embedding reads in float32: the
  // reader fills it in the flat buffer, and held_matrices_read() rounds it.
  static std::map<int64_t, bfloat16*> hold_matrices_in_bf16(GPT& m);
  // After the reader has filled everything: a tied head's bf16 copy.
  static void held_matrices_read(GPT& m);
  // Makes m hold its matrices in bf16 only (E = bfloat16), read where files
  // mapped in memory hold them: `runs` by ParamInfo offset for every matrix (a tied
  // head: wte's offset), and wte16 (or null) wte itself, whose float32
  // copy is then left unwritten too. `keep` owns the mappings.
  // The same for a float32 file (E = float): its matrices and wte are read
  // where it lies under float32 compute, rounded from there for bf16.
  template <class E>
  static void hold_matrices_mapped(GPT& m, std::map<int64_t, RowRuns<E>> runs, const E* wte,
                                   std::vector<std::shared_ptr<const void>> keep);
  // After hold_matrices_mapped<float>: the matrices copied from the mapped
  // file into panels (Work::panels32, sgemm_panels), their pages of the
  // file let go from this process. For a model whose Linear layers see
  // few rows at a time and whose matrices are small enough to copy at load
  // (an encoder on short texts): the panels stream from memory as one
  // sequential read a thread, with no horizontal sums, where the dot
  // products of the rows where they lie wait on many streams.
  static void pack_matrices(GPT& m);
  // Rows [r0, r0 + n) of the parameter at `offset` (ParamInfo::offset, rows
  // of `cols`) as float32 at out [n, cols], exactly (bf16 widened,
  // quantized rows dequantized), from wherever m holds them: the flat
  // buffer, a bf16 copy, a mapped file or quantized runs.
  static void rows_at(const GPT& m, int64_t offset, int64_t cols, int64_t r0, int64_t n, float* out);
  // Makes m hold its matrices, head and embedding table quantized to `type`
  // (Q8_0 or Q4_0, the reference quantizers), from wherever they are held
  // now; what held them before (float32 or bf16 copies, mapped files) is
  // let go. qkv::Error naming a matrix whose rows are not whole blocks.
  static void quantize_matrices(GPT& m, WeightType type);
  // Makes m hold its matrices quantized (gpt_quantized.cpp): `runs` by
  // ParamInfo offset for every matrix (a tied head: wte's offset), `wte`
  // the embedding table, `owned` the bytes some runs point into and `keep`
  // the mappings the others do; the flat buffer's copies stay unwritten.
  // qk_paired: c_attn's q and k runs in a GGUF llama file's row order
  // (Work::qk_paired).
  static void hold_matrices_quantized(GPT& m, std::map<int64_t, std::vector<Weight>> runs, const Weight& wte,
                                      std::vector<uint8_t> owned, std::vector<std::shared_ptr<const void>> keep,
                                      bool qk_paired = false);
};

}  // namespace qkv
