/// @file
/// qkv/nn.h: the layers of qkv, each with its forward and backward: one
/// implementation shared by the GPT and the attention lessons (qkv/modules.h,
/// qkv/positional.h).
///
/// Plain functions on contiguous buffers, in the style of llm.c: outputs
/// first, then inputs, then sizes; a shape comment on each. Each is a template
/// over the element type T, defined (explicitly instantiated) for two:
///   float   the GPT's training and sampling path: the GEMM backend (oneDNN),
///           SIMD and OpenMP threads, bitwise the same for any thread count;
///   double  plain loops, every sum in index order: the lessons' arithmetic
///           (their digits match NumPy's) and the float64 model the
///           whole-model gradient test differentiates.
/// Backward functions ACCUMULATE (+=) into parameter gradients and input
/// gradients, so a residual stream's gradient can be summed by several
/// consumers; callers zero the gradient buffers once per step. Linear (input
/// and parameter gradients) and GELU can instead overwrite (Grad::overwrite),
/// for a buffer whose first producer they are, which then needs no zeroing.
/// The pure data movements (RoPE, head split and merge) always write, as
/// their forward does.
///
/// Sizes: BT rows (batch x time), C channels, OC output channels, V vocab;
/// B, T, H, D as in the glossary of qkv/tensor.h (H a head count, Hq or Hkv).
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"  // bfloat16

namespace qkv::nn {

/// How a Linear layer's weight is stored.
///   out_in  [OC, C]: y = x · Wᵀ, PyTorch's nn.Linear (the GPT; checkpoints
///           load in PyTorch as they are)
///   in_out  [C, OC]: y = x · W, the NumPy lessons' orientation
enum class WeightLayout { out_in, in_out };

/// How a float32 Linear layer multiplies (float64 has only f32's plain loops):
///   f32   float32 operands (sgemm)
///   bf16  operands rounded to bfloat16, products summed in float32
///         (gemm_bf16): mixed-precision training. Inputs, outputs, weights
///         and gradients stay float32 in memory; the bias is added in float32.
enum class Matmul { f32, bf16 };

/// What a backward does with a gradient it produces:
///   accumulate  += the gradient (a residual stream's gradient sums several
///               consumers; a parameter's sums every use of it)
///   overwrite   = the gradient, never reading the buffer (NaN there does not
///               propagate): a buffer whose first (or only) producer this is
///               needs no zeroing
enum class Grad { accumulate, overwrite };

/// out [BT, OC] = inp [BT, C] · W + bias, W per `layout`, bias [OC] or null.
/// Each output sums its C products first and adds the bias last (NumPy's
/// x @ W + b). float runs on the GEMM backend (see linalg/gemm.h).
template <class T>
QKV_API void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t BT,
                            int64_t C, int64_t OC, WeightLayout layout = WeightLayout::out_in,
                            Matmul matmul = Matmul::f32);
/// dinp [BT, C] += dout · weight (= under dinp_mode overwrite);  dweight [OC, C] += doutᵀ · inp
/// and dbias [OC] += Σ dout (= under param_mode overwrite). Weight [OC, C] (out_in) only; dbias may be null (no bias). Under
/// Matmul::bf16 both GEMMs round their operands (dout, weight, inp); the
/// bias gradient sums dout in float32.
template <class T>
QKV_API void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                             const T* weight, int64_t BT, int64_t C, int64_t OC,
                             Matmul matmul = Matmul::f32, Grad dinp_mode = Grad::accumulate,
                             Grad param_mode = Grad::accumulate);
/// Mixed precision with the input already in bfloat16 (rounded by the layer
/// that made it: LayerNorm or GELU with a bfloat16 out): Matmul::bf16 on
/// float32 weights and gradients. The same bits as the float32-input calls
/// with Matmul::bf16 on the values inp was rounded from; the GEMMs read half
/// the bytes, and the forward's, for C even, packs no input at all.
QKV_API void linear_forward(float* out, const bfloat16* inp, const float* weight, const float* bias,
                            int64_t BT, int64_t C, int64_t OC,
                            WeightLayout layout = WeightLayout::out_in);
/// The backward of that forward: gradients as the float32-input backward's,
/// reading the bfloat16 input.
QKV_API void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                             const bfloat16* inp, const float* weight, int64_t BT, int64_t C,
                             int64_t OC, Grad dinp_mode = Grad::accumulate,
                             Grad param_mode = Grad::accumulate);

/// out [BT, C] = (inp - mean) * rstd * weight + bias per row, rstd = 1 /
/// sqrt(var + eps) (PyTorch's default eps 1e-5; BERT's config says 1e-12);
/// mean [BT] and rstd [BT] saved for the backward, which needs no eps.
/// bias (and dbias) may be null.
template <class T>
QKV_API void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight,
                               const T* bias, int64_t BT, int64_t C, double eps = 1e-5);
/// The float32 forward with out rounded to bfloat16 (the input of a bf16
/// Linear layer under mixed precision): the float32 values, rounded once.
QKV_API void layernorm_forward(bfloat16* out, float* mean, float* rstd, const float* inp,
                               const float* weight, const float* bias, int64_t BT, int64_t C,
                               double eps = 1e-5);
/// dinp [BT, C] += dL/dinp; dweight, dbias [C] += their gradients (dbias may
/// be null), from the forward's saved mean and rstd.
template <class T>
QKV_API void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                                const T* weight, const T* mean, const T* rstd, int64_t BT,
                                int64_t C);

/// out [BT, C] = inp · rstd · weight per row, rstd = 1 / sqrt(mean(inp²) + eps)
/// (RMSNorm: Llama's norm, no mean subtracted, no bias), rstd [BT] saved;
/// sums in double.
template <class T>
QKV_API void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t BT, int64_t C,
                             double eps);
/// dinp [BT, C] += dL/dinp and dweight [C] += its gradient, from the
/// forward's saved rstd; sums in double.
template <class T>
QKV_API void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                              const T* rstd, int64_t BT, int64_t C);

/// out [BT, F] = silu(inp[:, :F]) · inp[:, F:] for inp [BT, 2F] (SwiGLU,
/// the gate's F columns first, then the up projection's), silu(x) = x / (1 +
/// e^-x). Computed in double, rounded once.
template <class T>
QKV_API void swiglu_forward(T* out, const T* inp, int64_t BT, int64_t F);
/// dinp [BT, 2F] = dL/dinp (written, not added: the gate's and the up
/// projection's halves) from dout [BT, F]. Computed in double, rounded once.
template <class T>
QKV_API void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t BT, int64_t F);

/// Which GELU:
///   exact  x Φ(x) = 0.5 x (1 + erf(x / √2)): PyTorch's nn.GELU(), nanoGPT's
///   tanh   0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))): GPT-2's approximation,
///          what qkv's models used before the choice existed
enum class Gelu { exact, tanh };

/// out [N] = gelu(inp [N]), in the given form.
template <class T>
QKV_API void gelu_forward(T* out, const T* inp, int64_t N, Gelu form);
/// The float32 forward with out rounded to bfloat16 (as layernorm_forward's).
QKV_API void gelu_forward(bfloat16* out, const float* inp, int64_t N, Gelu form);
/// dinp [N] += gelu'(inp) · dout (= under Grad::overwrite).
template <class T>
QKV_API void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t N, Gelu form,
                           Grad dinp_mode = Grad::accumulate);

/// out [B*T, C] = wte[tokens[b,t]] + wpe[t]; wte [V, C], wpe [maxT, C]
/// (wpe may be null: no learned positions, e.g. with RoPE). With wpe null it
/// is a pure gather of rows (a token table, or a position table indexed by
/// position). Token ids are not checked here: callers check them once.
template <class T>
QKV_API void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                               int64_t Tn, int64_t C);
/// The same from a bf16 token table (a checkpoint's, where it lies): each
/// row widened to float32 exactly, then wpe added as above.
QKV_API void embedding_forward(float* out, const int32_t* tokens, const bfloat16* wte, const float* wpe,
                               int64_t B, int64_t Tn, int64_t C);
/// dwte [V, C] and dwpe [maxT, C] += the gradients of embedding_forward's
/// rows (dwpe may be null, as wpe).
template <class T>
QKV_API void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                                int64_t Tn, int64_t C);

/// probs [BT, V] = softmax(logits); losses [BT] = -log probs[target].
template <class T>
QKV_API void crossentropy_forward(T* losses, T* probs, const T* logits, const int32_t* targets,
                                  int64_t BT, int64_t V);
/// dlogits [BT, V] += (probs - onehot(target)) * dloss, dloss the gradient of
/// the loss w.r.t. each row's loss (1 / BT for a mean).
template <class T>
QKV_API void crossentropy_backward(T* dlogits, const T* probs, const int32_t* targets, T dloss,
                                   int64_t BT, int64_t V);

/// out = a + b, N elements (the residual stream); out may be a or b.
template <class T>
QKV_API void residual_forward(T* out, const T* a, const T* b, int64_t N);

// ---- attention's data movements ---------------------------------------------

/// Heads out of a row of features: src [B, T, row] holds, from column col0,
/// H heads of D features each ([B, T, H, D]); dst [B, H, T, D] gets them in
/// the layout qkv::attention takes. row = H*D and col0 = 0 for a plain
/// projection (split_qkv below takes the GPT's fused c_attn row).
template <class T>
QKV_API void split_heads(T* dst, const T* src, int64_t B, int64_t Tn, int64_t H, int64_t D,
                         int64_t row, int64_t col0);
/// The inverse: src [B, H, T, D] -> dst [B, T, row], columns col0 .. col0 + H*D.
/// Being a permutation, each is the other's backward.
template <class T>
QKV_API void merge_heads(T* dst, const T* src, int64_t B, int64_t Tn, int64_t H, int64_t D,
                         int64_t row, int64_t col0);
/// The GPT's fused c_attn row [q heads | k heads | v heads], src [B, T,
/// (Hq + 2 Hkv) D] -> q [B, Hq, T, D], k and v [B, Hkv, T, D]: the three
/// split_heads calls in one pass (one parallel region instead of three).
/// With qk_paired, each q and k head of src holds its D features with RoPE's
/// pairs adjacent, (x_0, x_{D/2}, x_1, x_{D/2+1}, ...), as the rows of a GGUF
/// llama file's q and k weights give them: q and k get them back in halves.
template <class T>
QKV_API void split_qkv(T* q, T* k, T* v, const T* src, int64_t B, int64_t Tn, int64_t Hq,
                       int64_t Hkv, int64_t D, bool qk_paired = false);
/// Its inverse (and backward): q, k, v -> dst [B, T, (Hq + 2 Hkv) D].
template <class T>
QKV_API void merge_qkv(T* dst, const T* q, const T* k, const T* v, int64_t B, int64_t Tn,
                       int64_t Hq, int64_t Hkv, int64_t D);

/// Rotary position embedding (RoPE, Su et al. 2021), half-split pairs (GPT-NeoX,
/// Hugging Face LLaMA; see qkv/positional.h): with theta_i = 1 / base^(2i/D),
/// pair (i, i + D/2), i < D/2, at position p turns by the angle p·theta_i.
/// The cos and sin of every angle for positions first .. first + positions - 1
/// are computed once, in double, when the table is built: a model builds one
/// per (context, head dim) and every step reuses it.
class QKV_API RopeTable {
 public:
  RopeTable() = default;
  /// Throws qkv::Error if positions < 0, first < 0, D is odd or < 2, or base
  /// is not a finite number > 0.
  RopeTable(int64_t positions, int64_t D, double base = 10000.0, int64_t first = 0);
  /// The same from the frequencies theta_i themselves ([D/2], e.g. scaled
  /// as a model's rope_scaling says); each must be finite.
  RopeTable(int64_t positions, const std::vector<double>& theta, int64_t first = 0);

  int64_t first() const { return first_; }          ///< the first position in the table
  int64_t positions() const { return positions_; }  ///< how many positions it holds
  int64_t head_dim() const { return D_; }           ///< D, the rotated head dim
  double base() const { return base_; }             ///< theta's base (0: built from frequencies)
  /// cos, sin of p·theta_i, interleaved [D/2][2], for first() <= p < first() + positions().
  const double* row(int64_t p) const { return cs_.data() + (p - first_) * D_; }

 private:
  void fill(const std::vector<double>& theta);

  int64_t first_ = 0, positions_ = 0, D_ = 0;
  double base_ = 10000.0;
  std::vector<double> cs_;  ///< [positions, D/2, 2]
};

/// out [R, T, D] = RoPE(inp [R, T, D]): row (r, t) sits at position pos0 + t
/// (R the leading dims flattened: batch and heads). In place when out == inp.
/// Computed in double, rounded once to T:
///   out[i]       = x[i] cos - x[i + D/2] sin
///   out[i + D/2] = x[i + D/2] cos + x[i] sin
/// Throws qkv::Error if D differs from the table's or the positions
/// pos0 .. pos0 + T - 1 are not all in it.
template <class T>
QKV_API void rope_forward(T* out, const T* inp, const RopeTable& table, int64_t R, int64_t Tn,
                          int64_t D, int64_t pos0 = 0);
/// dinp = RoPE⁻¹(dout): a rotation's backward is the rotation back (by -angle),
/// the transpose of its matrix. In place when dinp == dout.
template <class T>
QKV_API void rope_backward(T* dinp, const T* dout, const RopeTable& table, int64_t R, int64_t Tn,
                           int64_t D, int64_t pos0 = 0);

}  // namespace qkv::nn
