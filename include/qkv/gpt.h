/// @file
/// qkv/gpt.h: the transformer, with forward and backward. nanoGPT's GPT is
/// its default configuration; a real checkpoint's architecture (BERT, GPT-2,
/// ...) is another GPTConfig, run by the same code.
///
///   tokens [B, T] -> wte + wpe (+ wtt) (-> ln_e) -> L x block (-> ln_f)
///                 -> logits = x · wteᵀ (tied), or the hidden states (an encoder)
///   block, pre-norm (GPT):   x += attn(ln_1(x));  x += mlp(ln_2(x))
///   block, post-norm (BERT): x = ln_1(x + attn(x));  x = ln_2(x + mlp(x))
///   attn:  c_attn (fused Q, K, V; Hkv <= H heads for GQA) -> attention
///          (qkv::attention; causal top-left, or bidirectional) -> c_proj
///   mlp:   c_fc (F = GPTConfig::ffn_dim()) -> GELU (exact or tanh) -> c_proj
/// Every layer is one of qkv/nn.h; RoPE (when on) turns q and k after the
/// head split, from one cos/sin table built with the model.
///
/// Parameters live in one buffer (so the optimiser and checkpoints
/// treat them as one vector) and are named as in nanoGPT's state_dict, so a
/// checkpoint loads into PyTorch by name. Activations are allocated once for
/// a given (B, T) and reused every step.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/attention.h"
#include "qkv/export.h"
#include "qkv/nn.h"

namespace qkv {

/// The model's shape and its block description, validated by validate().
struct QKV_API GPTConfig {
  int64_t vocab = 0;     ///< vocabulary size V
  int64_t context = 64;  ///< maximum sequence length T (block_size)
  int64_t layers = 4;    ///< transformer blocks L
  int64_t heads = 4;     ///< query heads H
  int64_t kv_heads = 4;  ///< GQA when < heads
  int64_t embd = 128;    ///< C
  bool rope = false;     ///< RoPE on q and k instead of the learned wpe table
  bool bias = false;     ///< biases in Linear and LayerNorm layers (nanoGPT: off)
  /// The MLP's GELU: exact (erf, nanoGPT's nn.GELU()) for new models; tanh for
  /// models trained before the choice existed (a config.json without "gelu").
  nn::Gelu gelu = nn::Gelu::exact;

  /// The rest of the block description: nanoGPT's choices by default; a real
  /// checkpoint's architecture sets them (Model::load reads a Hugging Face
  /// config.json into them). Training (backward) takes the defaults only.
  int64_t ffn = 0;          ///< the MLP's hidden width F; 0 means 4 * embd
  double norm_eps = 1e-5;   ///< every LayerNorm's eps
  bool post_norm = false;   ///< normalise after each residual sum (BERT) instead of before
  bool causal = true;       ///< false: every position attends to every other (an encoder)
  int64_t token_types = 0;  ///< rows of a token-type table (BERT's segments); type 0 is added
  bool embed_norm = false;  ///< a LayerNorm on the embeddings (ln_e, BERT)
  bool final_norm = true;   ///< ln_f after the last block (GPT; BERT has none)
  bool lm_head = true;      ///< logits through the tied wte; false: the hidden states are the output
  bool tied_head = true;    ///< the head is wte; false: its own lm_head.weight [V, C] (Llama)
  bool rms_norm = false;    ///< RMSNorm (a weight, no mean, no bias; Llama) instead of LayerNorm
  /// The MLP as SwiGLU (Llama): silu(x W_gate) * (x W_up), then W_down;
  /// c_fc holds W_gate's F rows, then W_up's.
  bool swiglu = false;
  /// Biases in the attention's Linear layers (q, k, v and the output
  /// projection) although `bias` is off: Llama's attention_bias.
  bool attn_bias = false;
  /// Biases in q, k and v only, not in the output projection: Qwen2's.
  bool qkv_bias = false;
  /// Biases in the MLP's Linear layers although `bias` is off: Llama's mlp_bias.
  bool mlp_bias = false;
  /// The width of a head, hs, where a checkpoint sets its own (config.json's
  /// head_dim); 0 means embd / heads. The attention then works in
  /// heads * hs columns, which c_proj brings back to embd.
  int64_t head_size = 0;
  /// A sliding window (Mistral's sliding_window): query i sees keys j with
  /// i - window < j (as well as the causal j <= i); 0: every earlier key.
  int64_t window = 0;
  double rope_theta = 10000.0;  ///< RoPE's base
  /// RoPE's frequencies as a model was trained to stretch them:
  /// none, linear (every frequency / factor), llama3 (Llama 3.1's: long
  /// wavelengths / factor, short ones kept, a smooth blend between) or
  /// factors (each frequency / its own factor: a GGUF file's rope_freqs).
  struct RopeScaling {
    /// How the frequencies are stretched.
    enum class Kind {
      none,    ///< as rope_theta gives them
      linear,  ///< every frequency / factor
      llama3,  ///< Llama 3.1's: by wavelength against original_context
      factors  ///< frequency i / factors[i]
    };
    Kind kind = Kind::none;         ///< which scaling
    double factor = 1.0;            ///< the stretch (linear, llama3)
    double low_freq_factor = 1.0;   ///< llama3: wavelengths above original_context / this are stretched
    double high_freq_factor = 4.0;  ///< llama3: wavelengths below original_context / this are kept
    int64_t original_context = 8192;  ///< llama3: the context before scaling
    std::vector<float> factors;       ///< factors: one per frequency (head_dim / 2), each finite > 0
  };
  RopeScaling rope_scaling;  ///< none unless a checkpoint's config says

  int64_t head_dim() const { return head_size ? head_size : embd / heads; }  ///< hs: head_size, or C / H
  int64_t attn_dim() const { return heads * head_dim(); }  ///< A = H * hs, the heads merged

  /// The MLP's hidden width: ffn, or 4 * embd when ffn is 0.
  int64_t ffn_dim() const { return ffn ? ffn : 4 * embd; }
  bool qkv_biased() const { return bias || attn_bias || qkv_bias; }  ///< c_attn has a bias
  bool proj_biased() const { return bias || attn_bias; }             ///< attn.c_proj has a bias
  bool mlp_biased() const { return bias || mlp_bias; }    ///< c_fc and mlp.c_proj have biases
  /// What backward() can train: a language model with a final norm, pre-
  /// or post-norm, causal or not, with any of the options above (nanoGPT's,
  /// GPT-2's and Llama's blocks); not BERT's token types or embedding norm.
  bool trainable() const { return token_types == 0 && !embed_norm && final_norm && lm_head; }
  /// Throws qkv::Error naming the first inconsistent field.
  void validate() const;
};

/// The allocator of a model's weights: its memory starts zeroed
/// (alloc_zeroed) and default construction writes nothing, so the float32
/// copy of matrices a model holds in bf16 is never touched. Only for a
/// vector sized once.
template <class T>
struct ZeroedAllocator {
  using value_type = T;  ///< what it allocates
  ZeroedAllocator() = default;
  /// Stateless: any one converts to any other.
  template <class U>
  ZeroedAllocator(const ZeroedAllocator<U>&) noexcept {}
  /// n zeroed elements (alloc_zeroed).
  T* allocate(size_t n) { return static_cast<T*>(alloc_zeroed(n * sizeof(T))); }
  /// Frees what allocate(n) gave.
  void deallocate(T* p, size_t n) noexcept { free_zeroed(p, n * sizeof(T)); }
  /// Default construction writes nothing: the memory is already zero.
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  /// Construction from arguments, as std::allocator's.
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  /// Stateless: all are equal.
  friend bool operator==(const ZeroedAllocator&, const ZeroedAllocator&) { return true; }
};

/// One named parameter: a view into the flat buffer.
struct ParamInfo {
  std::string name;    ///< nanoGPT's state_dict name, e.g. "transformer.h.0.attn.c_attn.weight"
  Shape shape;         ///< its shape
  int64_t offset = 0;  ///< in floats
  int64_t size = 0;    ///< in floats
  bool decay = false;  ///< weight decay applies (matrices, not biases or norms)
};

/// Keys and values of the tokens decoded so far, per layer: the KV cache of
/// generation. It owns its buffers and is made for one model shape (by
/// GPT::new_cache, or from the model's config); decode refuses a cache
/// made for another shape or element type, and refuses to append past the
/// context, with a qkv::Error naming what differs.
class QKV_API KVCache {
 public:
  /// An empty cache for a model of this config (validated) and element type:
  /// float32 or bf16 for GPT, float64 for BasicGPT<double>. A bf16 cache
  /// holds the keys and values rounded to bfloat16 as they are appended
  /// (half the memory, half the bytes attention reads per token); the
  /// queries are rounded too and attention runs the bf16 kernel on them in
  /// place (float32 scores, softmax and output), as the bf16 forward does.
  explicit KVCache(const GPTConfig& cfg, DType dtype = DType::f32);

  int64_t len() const { return len_; }            ///< positions filled: 0 .. capacity()
  int64_t capacity() const { return cfg_.context; }  ///< positions it can hold: the context
  DType dtype() const { return dtype_; }             ///< float32, bf16 or float64
  /// Bytes of its buffers now: they grow with the sequence (doubling, from
  /// 256 positions) up to the whole context's.
  int64_t nbytes() const;
  /// Starts a new sequence; the buffers are kept and overwritten.
  void reset() { len_ = 0; }
  /// Grows the buffers to hold exactly n positions now (at most the
  /// context; nothing when they hold n already), keeping what they hold: a
  /// caller who knows how long the sequence gets allocates once, no more
  /// than it needs. Decoding past them grows them by doubling. Buffers
  /// never shrink.
  void reserve(int64_t n);
  /// The bytes a new cache for cfg holds after reserve(n): nbytes() before
  /// it is made, for a caller that budgets memory.
  static int64_t bytes_after_reserve(const GPTConfig& cfg, DType dtype, int64_t n);
  /// Layer l's keys (RoPE already applied when the model uses it) and values,
  /// [1, Hkv, n, D] for the n >= len() positions held so far (up to
  /// capacity()); positions >= len() hold stale values. Throws
  /// qkv::Error for a layer outside 0 .. layers - 1.
  const Tensor& keys(int64_t layer) const;
  const Tensor& values(int64_t layer) const;  ///< see keys()

 private:
  template <class T>
  friend class BasicGPT;
  /// Throws qkv::Error unless the cache was made for a model of cfg's shape
  /// (layers, kv_heads, head dim, context, RoPE) and an element type a model
  /// of model_dtype takes (its own; bf16 too for float32), and has n free
  /// positions.
  void check_append(const GPTConfig& cfg, DType model_dtype, int64_t n) const;
  /// Buffers of `positions` positions (none fewer than now), what they hold kept.
  void resize_to(int64_t positions);
  /// Buffers for n positions, doubling what they hold when they grow.
  void grow_for(int64_t n);

  GPTConfig cfg_;
  DType dtype_ = DType::f32;
  int64_t len_ = 0;
  std::vector<Tensor> k_, v_;  ///< per layer [1, Hkv, positions held, D]
};

/// The model, over its element type T:
///   float   (GPT) training and sampling: the GEMM backend and the fast
///           attention kernel (by default; see set_attention);
///   double  the same code on the float64 layers of qkv/nn.h and the
///           reference attention kernel: slow, for checking the float model
///           and its gradients (tests/test_gpt_grad.cpp).
template <class T>
class BasicGPT {
 public:
  /// A model of this config (validated: qkv::Error naming the field), its
  /// weights zero until init() or a load sets them.
  explicit BasicGPT(const GPTConfig& cfg);
  ~BasicGPT();
  BasicGPT(BasicGPT&&) noexcept;             ///< moves the weights and scratch
  BasicGPT& operator=(BasicGPT&&) noexcept;  ///< moves the weights and scratch

  const GPTConfig& config() const { return cfg_; }                    ///< its shape
  const std::vector<ParamInfo>& params() const { return params_; }    ///< every parameter, in buffer order
  /// The flat parameter buffer (taken for writing: bf16 compute rounds the
  /// Linear layers' weights again before its next forward). A model that
  /// holds its matrices in bf16 widens them into it first (see
  /// matrices_dtype()).
  std::span<T> weights() {
    widen_matrices();
    weights_written_ = true;
    return {w_.data(), w_.size()};
  }
  /// The flat parameter buffer, read only (widened first, as above).
  std::span<const T> weights() const {
    const_cast<BasicGPT*>(this)->widen_matrices();  // fills a cache: the values do not change
    return {w_.data(), w_.size()};
  }
  /// The dtype the Linear layers' matrices (and an untied head) are held in:
  /// float32; or bf16 for a model read from a bf16 checkpoint (Model::load),
  /// which holds them only in bf16 (half the memory) until something needs
  /// them in float32 (float32 compute, training, weights()): then they are
  /// widened, exactly, once, and it holds both.
  DType matrices_dtype() const { return matrices_in_bf16_ ? DType::bf16 : dtype_of<T>(); }
  /// True while the matrices are held quantized (a GGUF model): each
  /// Linear's product is weight_matmul's, in float32 whatever the compute
  /// dtype, until something needs them in float32 (see matrices_dtype()).
  bool matrices_quantized() const { return matrices_quantized_; }
  /// The bytes of weights read where the checkpoint's files, mapped into
  /// memory, hold them (a float32 or bf16 checkpoint whose matrices are
  /// stored as the model reads them: no copy, the memory is the system's
  /// file cache and is shared); 0 when every weight is the model's own copy.
  /// weights() and training make the model's own copy.
  int64_t mapped_weight_bytes() const;
  /// The bytes of float32 matrices (padding not counted) copied at load into
  /// the packed layout their products read fastest (an encoder's, where the
  /// CPU runs AVX-512); the file's pages they came from are let go. 0 when
  /// none are; weights() and training make the model's own copy instead.
  int64_t packed_weight_bytes() const;
  /// Gradients, laid out as weights(); allocated (zeros) by the first call
  /// here or to backward(), so that a model only run never holds them.
  std::vector<T>& grads() {
    if (g_.size() != w_.size()) g_.assign(w_.size(), T(0));
    return g_;
  }
  int64_t num_params() const { return static_cast<int64_t>(w_.size()); }  ///< weights().size()

  /// nanoGPT's initialisation from a seed: N(0, 0.02) for matrices and
  /// embeddings, N(0, 0.02 / sqrt(2 L)) for the residual projections, zero
  /// biases, unit LayerNorm weights.
  void init(uint64_t seed);

  /// Runs the model on tokens [B, T] (T <= context). With targets [B, T],
  /// returns the mean cross-entropy loss (summed in double) and keeps what
  /// backward needs; without, returns 0. logits() is [B*T, V] afterwards.
  T forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t Tn);
  /// Gradients of the last forward's mean loss into grads(), replacing (never
  /// adding to) what it held.
  void backward();
  /// The last forward's logits [B*T, V] (a view of this model's scratch).
  const T* logits() const;

  /// Generation with the KV cache: runs tokens [n] (B = 1) at positions
  /// cache.len() .. cache.len() + n - 1 through the same blocks as forward(),
  /// appends their keys and values to the cache, and returns the logits [V]
  /// of the token after the last one. The queries attend to every cached key
  /// and causally among themselves. decode_step(token, cache) is the one-token
  /// case: one query against the cached keys instead of recomputing the whole
  /// context. Throws qkv::Error (and leaves the cache as it was) if the tokens
  /// do not fit in the cache, the cache was made for another model shape, or
  /// a token is outside the vocabulary. Under bf16 compute the Linear
  /// products run in bf16; attention runs on the cache's dtype (a bf16
  /// cache: the bf16 kernel, as the bf16 forward). The last block runs its
  /// projection and MLP, and the head, on the last token's row alone: the
  /// other rows' keys and values are all the cache keeps of them. A long
  /// prompt runs in passes of at most 256 tokens, so that the activations
  /// held stay those of 256 rows whatever its length.
  ///
  /// The span views this model's scratch: valid until the next call on this
  /// model (or its destruction). A view, not a copy, because sampling calls
  /// this once per token and reads the logits once; a caller who keeps them
  /// copies them (std::vector<float>(l.begin(), l.end())).
  std::span<const T> decode(const int32_t* tokens, int64_t n, KVCache& cache);
  /// decode() of one token.
  std::span<const T> decode_step(int32_t token, KVCache& cache) { return decode(&token, 1, cache); }
  /// One decode step of B sequences together: tokens[b] goes at position
  /// caches[b]->len() of sequence b, whose keys and values are caches[b]'s
  /// (any lengths, each its own). The B rows go through every product
  /// together, so the weights are read once for the batch (decode is bound
  /// by reading them: B sequences cost little more than one), and each row
  /// attends to its own cache. Returns the logits [B, V] (row b: sequence
  /// b's next token), a view of this model's scratch as decode()'s.
  /// Each row's logits are those decode_step(tokens[b], *caches[b]) gives,
  /// within the rounding of the products at B rows rather than one (the
  /// same bits for a quantized model's under 16 sequences, whose dots do
  /// not depend on the rows beside them). Throws qkv::Error, leaving every
  /// cache's length and contents as they were (its buffers may have grown),
  /// when the sizes differ, B is 0, a cache appears twice, the caches hold
  /// different dtypes, or any one would refuse decode_step.
  std::span<const T> decode_batch(std::span<const int32_t> tokens, std::span<KVCache* const> caches);

  /// The last hidden states of a batch of sequences packed end to end: tokens
  /// [N = Σ n_i], lengths [B] = n_i, each 1 .. context. Each sequence sits at
  /// positions 0 .. n_i - 1 and attends only within itself (causally or not,
  /// as the config says); the layers spend no work on padding. Returns [N, C]
  /// (after ln_f when the model has one): an encoder's output, and what an
  /// embedding pools. A view of this model's scratch, valid until the next
  /// call on this model. Throws qkv::Error on a bad length or token id.
  std::span<const T> hidden_states(const int32_t* tokens, std::span<const int64_t> lengths);
  /// The KV cache's element type when none is asked for, under `compute`:
  /// bf16 under bf16 compute or with the matrices held quantized (as
  /// llama.cpp keeps a quantized model's cache in f16: half the bytes a
  /// decode step reads there), else the model's T (float32 or float64).
  DType default_kv_dtype(DType compute) const;
  /// An empty cache for this model: KVCache(config(), dtype); unset,
  /// default_kv_dtype under the compute dtype set now.
  KVCache new_cache(std::optional<DType> dtype = std::nullopt) const;

  /// What the model looks at: the attention weights of every layer and head
  /// for one sequence tokens [n] (n <= context), as its forward computes them
  /// (causal or not as configured, after RoPE when on): [layers, heads, n, n]
  /// in T, rows summing to 1.
  Tensor attention_maps(const int32_t* tokens, int64_t n);

  /// Threads for everything the model runs (attention, layers, GEMM; 0 = all
  /// cores): forward, backward, decode and attention_maps each run
  /// under a ThreadScope of this count, the one place it is set.
  void set_threads(int threads);
  int threads() const { return attn_opts_.threads; }  ///< as set_threads set it
  /// The attention kernel, and the threads as set_threads.
  void set_attention(Kernel kernel, int threads);
  /// Mixed precision (GPT only): DType::bf16 runs every Linear layer as a
  /// bf16 GEMM (operands rounded to bfloat16, products summed in float32;
  /// nn::Matmul::bf16) and attention on q, k, v rounded to bfloat16 (float32
  /// scores, softmax, output and gradients). Weights, gradients, the
  /// activations between layers, LayerNorm, GELU and the loss stay float32:
  /// the weights are the float32 "master" copy the optimiser updates.
  /// DType::f32, the default, is float32 throughout. decode() runs its
  /// Linear layers in the same dtype, its attention on the cache's float32.
  /// Throws qkv::Error for another dtype, or bf16 on BasicGPT<double>.
  void set_compute_dtype(DType dtype);
  DType compute_dtype() const { return compute_; }  ///< as set_compute_dtype set it

 private:
  struct Work;  ///< activations and scratch, reused across calls (src/model/gpt_work.h)

  void build_params();
  /// The one forward of every path: tokens [B, T] through the embedding,
  /// every block and the final norm. Without caches (training, logits,
  /// attention maps) each sequence sits at positions 0 .. T - 1, the blocks
  /// attend among the T positions and every position's logits are computed.
  /// With caches (generation: B = 1, or T = 1 for a batch of sequences),
  /// sequence b sits at positions caches[b]->len() on, its keys and values
  /// go to caches[b] (len() is left to the caller) and only its last
  /// position's logits are computed.
  /// With `lengths` (no caches), the B = lengths.size() sequences
  /// are packed end to end in tokens, each at positions 0 .. n_i - 1: the
  /// layers run on the Σ n_i real rows and attention on them padded to the
  /// longest, with key lengths. Every block's activations are kept
  /// for_backward (and for attention maps); otherwise the blocks share one set.
  void run(const int32_t* tokens, int64_t B, int64_t Tn, std::span<KVCache* const> caches,
           std::span<const int64_t> lengths = {}, bool for_backward = false);
  /// Block l's attention (q, k, v from its c_attn output) and its backward.
  void attention_forward(int64_t l, std::span<KVCache* const> caches);
  void packed_attention_forward(int64_t l);
  void attention_backward(int64_t l);
  /// The Linear layers' GEMM for a compute dtype.
  static nn::Matmul matmul_for(DType compute) {
    return compute == DType::bf16 ? nn::Matmul::bf16 : nn::Matmul::f32;
  }
  friend struct GptLoader;  // reads checkpoints into w_ and Work::weights16 (src/model/gpt_work.h)
  /// Work::weights16 rounded from w_'s matrices (src/model/gpt_weights.cpp).
  void round_matrices();
  /// Fills w_'s matrices (and wte) from where they are held instead: bf16
  /// copies, a mapped float32 checkpoint, or quantized weights.
  void widen_matrices();
  /// widen_matrices' part for quantized weights: each dequantized exactly
  /// (the reference dequantizers) into w_ (src/model/gpt_quantized.cpp).
  void dequantize_matrices();
  /// Offsets of absent parameters (no bias, no wpe) are -1: null pointers.
  const T* w(int64_t off) const { return off < 0 ? nullptr : w_.data() + off; }
  T* g(int64_t off) { return off < 0 ? nullptr : g_.data() + off; }

  GPTConfig cfg_;
  std::vector<ParamInfo> params_;
  std::vector<T, ZeroedAllocator<T>> w_;
  std::vector<T> g_;
  AttentionOptions attn_opts_;
  DType compute_ = DType::f32;
  /// The weights may have changed since bf16 compute last rounded them.
  bool weights_written_ = true;
  /// The matrices are in Work::mats16 only; w_'s copy of them is unwritten.
  bool matrices_in_bf16_ = false;
  /// The matrices (and wte) are read where a mapped float32 checkpoint holds
  /// them (Work::mats32); w_'s copy of them is unwritten.
  bool matrices_mapped_ = false;
  /// The matrices and wte are quantized (Work::matsq, a GGUF file's), the
  /// products weight_matmul's (qkv/weight.h); w_'s copy of them is unwritten.
  bool matrices_quantized_ = false;
  std::unique_ptr<Work> work_;  ///< heavy and address-stable
};

extern template class QKV_API BasicGPT<float>;
extern template class QKV_API BasicGPT<double>;

/// The model that trains, samples and is saved in checkpoints.
using GPT = BasicGPT<float>;

}  ///< namespace qkv
