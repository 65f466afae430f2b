/// @file
/// qkv/attention.h: exact scaled dot-product attention.
///
///   out = softmax(q·kᵀ · scale + mask) · v
///
/// Shapes (glossary in qkv/tensor.h):
///   q    [..., Hq,  N, D]
///   k    [..., Hkv, S, D]      Hq % Hkv == 0 (GQA; Hkv == 1 is MQA)
///   v    [..., Hkv, S, Dv]
///   out  [..., Hq,  N, Dv]     q's dtype (float32, float64 or bfloat16), or
///                              float32 for bfloat16 inputs (opts.out_dtype)
///   mask broadcastable to [..., Hq, N, S] (NumPy rules)
/// The leading "..." dims (zero or more) must be identical in q, k and v.
///
/// Inputs are views (qkv/view.h; a Tensor converts to one): any strides work.
/// q, k and v are read in place when their last dim is contiguous (stride 1),
/// so a slice of a KV cache, k[:, :, :len], costs no copy; an input whose last
/// dim is strided (a transposed or Fortran-ordered array) is copied once into
/// contiguous scratch. The outputs are always C-ordered Tensors.
///
/// bfloat16 (storage only): q, k and v in bf16 (all three, any strides), the
/// scores, softmax and P·V accumulated in float32; lse and weights are
/// float32. The fast kernel reads bf16 K and V in place (half the bytes of
/// float32: decode is bandwidth bound) and widens them tile by tile, or, on
/// a CPU with AVX512-BF16, computes Q·Kᵀ with vdpbf16ps (exact bf16 products,
/// float32 sums; bf16 denormals read as 0) and, for prefill, P·V with the
/// weights rounded to bf16 (as PyTorch's and FlashAttention's bf16 kernels).
/// The backward takes bf16 too and returns bf16 gradients (float32 ones when
/// opts.out_dtype is float32), summed in float32 and rounded once. With
/// AVX512-BF16 its five products run on vdpbf16ps, P and dS rounded to bf16
/// as their operands (as PyTorch's and FlashAttention's bf16 backward), a
/// float32 dout rounded to bf16 first (with check_finite, a value beyond
/// bf16's range is a qkv::Error); elsewhere it widens q, k, v, out and
/// dout to float32 once (O(N D) copies) and runs the float32 backward.
///
/// Semantics (the contract every kernel in qkv must match):
/// - scale defaults to 1/sqrt(D); any finite positive or negative value may be
///   given, 1.0 meaning "no scaling".
/// - mask: bool, true = may attend (PyTorch SDPA polarity); or float32/float64,
///   added to the scaled scores (-inf blocks; +inf and NaN are rejected).
///   A view like q, k, v: a stride of 0 broadcasts a dim in place.
/// - causal top-left: query i sees keys j <= i (PyTorch is_causal=True).
///   causal bottom-right: query i sees keys j <= i + S - N (KV-cache decode:
///   the last query sees every key). Causal and mask combine by AND.
/// - query head h reads key/value head h / (Hq / Hkv); a group's heads share
///   K and V, never copied per head.
/// - sliding window (left, right): query i sees keys j with
///   a(i) - left <= j <= a(i) + right, where a(i) is query i's diagonal: i, or
///   i + S - N when causal is bottom-right (the window is aligned like the
///   causal option). -1 leaves a side unbounded.
/// - key_lengths (one per flattened batch element): keys j >= key_lengths[b]
///   are padding and never visible; no dense mask needed.
/// - alibi_slopes (one per query head): adds -slope_h * |a(i) - j| to the score.
/// - softcap c > 0: score = c * tanh(score / c), after scaling and before any
///   mask or bias is added (Gemma 2 / Grok logit soft-capping).
/// - Every "not visible" rule (bool mask, causal, window, key_lengths, an
///   additive -inf) combines by AND.
/// - a row with no visible key gives out = 0, weights = 0 and lse = -inf,
///   never NaN.
/// - q, k and v must be finite: NaN or Inf in them is rejected with qkv::Error
///   naming the tensor and index, since it would otherwise surface as a NaN
///   result that looks like an answer. The check reads q, k and v once
///   before the attention; in decode (N <= 16) the fast kernel instead checks
///   the raw scores and outputs it computes, which are NaN or Inf exactly when
///   a key or value it read is (or when float32 overflows: then the problem
///   is redone on the reference), and costs nothing measurable. There it does
///   not see keys no query can see (past key_lengths, outside a window): a
///   KV cache's unwritten tail is not an error. check_finite = false turns
///   the check off, and NaN then propagates as in IEEE arithmetic.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qkv/export.h"
#include "qkv/tensor.h"
#include "qkv/view.h"

namespace qkv {

/// Which keys a query may see by position: all (none); key j <= i for
/// query i (top_left, PyTorch's is_causal); j <= i + S - N (bottom_right,
/// the last query sees every key, as in KV-cache decoding).
enum class Causal { none, top_left, bottom_right };

/// "none", "top-left", "bottom-right".
QKV_API const char* causal_name(Causal c);
/// Inverse of causal_name, the one place a causal name is read (the command
/// line and the Python package call it). Throws qkv::Error naming the field
/// and the allowed names: "causal: expected none, top-left or bottom-right,
/// found 'x'".
QKV_API Causal parse_causal(const std::string& s);

/// Which implementation runs. Both give the same results within float32
/// rounding; automatic picks fast for float32, the reference for float64.
/// Among the fast paths the op takes the one for active_isa() (qkv/runtime.h).
enum class Kernel { reference, fast, automatic };

/// "reference", "fast", "auto".
QKV_API const char* kernel_name(Kernel k);
/// Inverse of kernel_name; throws qkv::Error as parse_causal does ("kernel:
/// expected reference, fast or auto, found 'x'").
QKV_API Kernel parse_kernel(const std::string& s);

/// Keys a query may see around its diagonal (aligned as the causal mask is).
struct SlidingWindow {
  int64_t left = -1;   ///< keys before the diagonal a query may see; -1 = all
  int64_t right = -1;  ///< keys after the diagonal; -1 = all
};

/// Everything about one attention() call but its operands.
struct AttentionOptions {
  std::optional<double> scale;   ///< default 1/sqrt(D)
  TensorView mask;               ///< null view = no mask; not owned, must outlive the call
  Causal causal = Causal::none;  ///< the causal mask, if any
  std::optional<SlidingWindow> window;  ///< a sliding window, if any
  std::vector<int64_t> key_lengths;   ///< [B] (flattened leading dims), empty = no padding
  std::vector<double> alibi_slopes;   ///< [Hq], empty = no ALiBi
  double softcap = 0.0;               ///< 0 = off
  bool return_weights = false;   ///< fill AttentionResult::weights [..., Hq, N, S]
  bool return_lse = false;       ///< fill AttentionResult::lse     [..., Hq, N]
  bool check_finite = true;      ///< reject NaN/Inf in q, k, v (see above)
  Kernel kernel = Kernel::automatic;  ///< which implementation runs
  int threads = 0;               ///< fast kernel threads; 0 = all cores
  /// out's dtype; default q's. bfloat16 inputs may ask for float32 (skips
  /// rounding the float32 accumulators to bf16).
  std::optional<DType> out_dtype;
};

/// What attention() returns: out always, weights and lse when asked for.
struct AttentionResult {
  Tensor out;      ///< [..., Hq, N, Dv]
  Tensor weights;  ///< [..., Hq, N, S] if requested, else empty
  Tensor lse;      ///< [..., Hq, N] log-sum-exp of each row's scaled, masked scores
};

/// Runs the kernel chosen by opts.kernel. The reference kernel is plain loops
/// with double accumulation; the fast one is tiled, SIMD and threaded. Throws
/// qkv::Error on any shape, dtype or value problem.
///
/// Kernel::fast takes float32 and bfloat16 (float64 with fast is an error;
/// automatic sends float64 to the reference kernel).
QKV_API AttentionResult attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const AttentionOptions& opts = {});

/// The shapes of an AttentionResult.
struct AttentionShapes {
  Shape out;      ///< [..., Hq, N, Dv]
  Shape weights;  ///< [..., Hq, N, S]
  Shape lse;      ///< [..., Hq, N]
};
/// The shapes attention() would return for these arguments, after the same
/// checks (it throws qkv::Error as attention() would); nothing is computed or
/// allocated, so a caller can size or refuse a problem first.
QKV_API AttentionShapes attention_shapes(const TensorView& q, const TensorView& k,
                                         const TensorView& v, const AttentionOptions& opts = {});

/// The same, writing into `res`: tensors already of the right dtype and shape
/// are reused, so a loop of same-shaped calls (decoding, benchmarking)
/// allocates nothing.
QKV_API void attention_into(AttentionResult& res, const TensorView& q, const TensorView& k,
                            const TensorView& v, const AttentionOptions& opts = {});

/// Gradients of out = attention(q, k, v, opts).
struct AttentionGrads {
  Tensor dq;  ///< [..., Hq, N, D]
  Tensor dk;  ///< [..., Hkv, S, D]: a GQA group's query heads summed into their shared head
  Tensor dv;  ///< [..., Hkv, S, Dv]
};

/// Backward pass: given the forward's inputs, its out and lse (run the forward
/// with return_lse) and dout = dLoss/dout [..., Hq, N, Dv], fills g (reusing
/// its tensors when they fit, like attention_into). Same options and masks as
/// the forward; masks, ALiBi and additive biases get no gradient. The
/// reference kernel recomputes the weights in double; the fast one recomputes
/// each score tile from lse, so nothing of size N x S is stored. Fully masked
/// rows give zero gradients. Results are bitwise identical for any thread count.
/// out, lse and dout may be strided views too (copied once if they are not
/// C-ordered); the gradients are C-ordered Tensors of q's, k's and v's shapes.
QKV_API void attention_backward_into(AttentionGrads& g, const TensorView& q, const TensorView& k,
                                     const TensorView& v, const TensorView& out,
                                     const TensorView& lse, const TensorView& dout,
                                     const AttentionOptions& opts = {});

}  // namespace qkv
