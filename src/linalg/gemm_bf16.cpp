// gemm_bf16.cpp: mixed-precision GEMM (contract in gemm.h). On AVX512-BF16
// both operands are rounded into pairs (core/gemm_bf16_kernels.h, the kernels
// reached through the active path's table, core/isa_kernels.h) and C is cut
// into micro-tiles of kMR rows x kNR columns, each one thread's whole K sum;
// on AMX the same pairs feed 32 x 32 blocks of tiles; elsewhere the rounded
// operands are widened back and handed to sgemm.
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/isa_kernels.h"
#include "linalg/gemm.h"
#include "linalg/gemm_common.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"

namespace qkv::linalg {

using namespace qkv::kernels;  // the core's SIMD kernels and their tables

namespace {

using bf16gemm::AmxGemmKernels;
using bf16gemm::kMR;
using bf16gemm::kNR;
using bf16gemm::pair_word;
using bf16gemm::PairGemmKernels;
using bf16gemm::PairPacking;
using bf16gemm::pairs;

// The packed operands, kept per calling thread and grown, never shrunk: a
// training step calls this ~60 times on a few shapes, and first touching
// fresh pages costs more than the packing itself.
struct Packs {
  std::vector<uint32_t> a, b;
  std::vector<uint32_t> panel;  // a thread's slice of one panel of op(B) = Bᵀ
  std::vector<float> wa, wb;  // the widening path's rounded copies
};
Packs& packs() {
  thread_local Packs p;
  return p;
}
template <class V>
auto* grown(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// How many bytes of op(B)'s pairs on_avx512bf16 keeps in play while every
// row block passes over them: half of a Zen 4 or Sapphire Rapids core's L2.
constexpr int64_t kChunkBytes = 512 * 1024;
// The most pairs of K one slice of a panel of op(B) = Bᵀ holds: kNR columns
// of them, 256 KB, stay in a core's L2 beside the rows of op(A) streaming
// past.
constexpr int64_t kSlicePairs = 1024;

float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }
// An operand's element as the bf16 value it rounds to (bfloat16: itself).
float rounded(float x) { return round_bf16(x); }
float rounded(bfloat16 x) { return bf16_to_float(x); }

// op(X) [R, Cn] of X (stored [R, Cn], or [Cn, R] when trans) rounded to bf16,
// into dst [R, Cn] float32.
template <class T>
void rounded_op(bool trans, int64_t R, int64_t Cn, const T* X, int64_t ld, float* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < Cn; ++c)
      dst[r * Cn + c] = rounded(trans ? X[c * ld + r] : X[r * ld + c]);
}

// The operands rounded, then widened back for sgemm (CPUs without AVX512-BF16).
template <class TA, class TB>
void widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, float* C,
             int64_t ldc, const float* bias) {
  Packs& p = packs();
  float* a = grown(p.wa, M * K);
  float* b = grown(p.wb, K * N);
  rounded_op(trans_a, M, K, A, lda, a);
  rounded_op(trans_b, K, N, B, ldb, b);
  sgemm_bias(false, false, M, N, K, alpha, a, K, b, N, beta, bias, C, ldc);
}

// A float32 operand's elements as they are; a bfloat16 one's as bit patterns
// (the packing overloads for uint16_t).
const float* packable(const float* x) { return x; }
const uint16_t* packable(const bfloat16* x) { return reinterpret_cast<const uint16_t*>(x); }
// The packings for such elements.
const PairPacking<float>& packing(const PairGemmKernels& k, const float*) { return k.from_f32; }
const PairPacking<uint16_t>& packing(const PairGemmKernels& k, const uint16_t*) {
  return k.from_bf16;
}

// op(B)'s pairs into b [rows][Np] (rows >= pairs(K)), inside a parallel
// region: pair rows split between the threads, the columns past N and the
// rows past pairs(K) zero; ends with a barrier, so every thread may read all
// of b after it.
template <class TB>
void pack_b_pairs(const PairPacking<TB>& pk, bool trans_b, int64_t N, int64_t K, const TB* B,
                  int64_t ldb, uint32_t* b, int64_t Np, int64_t rows) {
  const int64_t np = pairs(K);
  if (trans_b) {  // B [N, K]: each pair adjacent in a row, gathered across rows
    const int64_t blocks = (N + 15) / 16, padded = blocks * 16;
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < blocks; ++blk)
      pk.gather_pairs(B, ldb, N, K, 16 * blk, std::min(N, 16 * blk + 16), b, Np);
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < np; ++p) std::fill(b + p * Np + padded, b + (p + 1) * Np, 0u);
  } else {
#pragma omp for schedule(static) nowait
    for (int64_t p = 0; p < np; ++p) pk.interleave_rows(B + 2 * p * ldb, ldb, std::min<int64_t>(2, K - 2 * p), N, b + p * Np, Np);
  }
#pragma omp for schedule(static)
  for (int64_t p = np; p < rows; ++p) std::fill(b + p * Np, b + (p + 1) * Np, 0u);
}

// op(B) = B, packed whole into b [np][Np] (pack_b_pairs): C in chunks of
// column panels whose op(B) pairs fit in half an L2 (kChunkBytes), each
// chunk met by every row block of op(A) before the next: a weight of tens
// of MB is then read from memory once, not once per row block. Work items
// are (chunk, row block), a thread's a contiguous run of them. When op(B) is
// one chunk (a small model's weights), that is row block by row block: a
// thread's tiles are a contiguous band of C's rows; for op(A) = A the band
// of A it packed (the same static split) and the rows the row-parallel
// layers before it wrote on this core. A row block of op(A) stays in L1
// across a chunk's panels. Inside the parallel region, after the packing.
void chunks_of_b(const PairGemmKernels& k, int64_t M, int64_t N, int64_t np, float alpha,
                 const pair_word* a, int64_t a_rs, int64_t a_ks, const uint32_t* b, int64_t Np,
                 float beta, float* C, int64_t ldc, const float* bias) {
  const int64_t mblocks = (M + kMR - 1) / kMR, panels = Np / kNR;
  const int64_t per_chunk = std::clamp<int64_t>(kChunkBytes / (np * kNR * 4), 1, panels);
  const int64_t chunks = (panels + per_chunk - 1) / per_chunk;
#pragma omp for schedule(static)
  for (int64_t t = 0; t < chunks * mblocks; ++t) {
    const int64_t chunk = t / mblocks, i0 = (t % mblocks) * kMR;
    const int rows = static_cast<int>(std::min<int64_t>(kMR, M - i0));
    for (int64_t panel = chunk * per_chunk; panel < std::min(panels, (chunk + 1) * per_chunk); ++panel) {
      const int64_t j0 = panel * kNR;
      const int cols = static_cast<int>(std::min<int64_t>(kNR, N - j0));
      k.tile(a + i0 * a_rs, a_rs, a_ks, rows, b + j0, Np, np, cols, alpha, beta,
             bias ? bias + j0 : nullptr, C + i0 * ldc + j0, ldc, bf16gemm::kWholeK);
    }
  }
}

// op(B) = Bᵀ (B [N, K]: a Linear's weight, one output a row, read where it
// lies): C in panels of kNR columns, work items (panel, band of row blocks),
// a band all of M unless there are too few panels to share. A thread packs
// its item's panel one slice of K at a time (kSlicePairs at most) into a
// buffer of its own, [pairs][kNR] contiguous, which stays in L2 while the
// band's row blocks pass over it; op(A)'s pairs stream past from L3. With
// beta != 0 K is one slice (a slice that does not end the sum leaves it in
// C). Inside the parallel region, after op(A)'s packing and a barrier.
template <class TB>
void panels_of_bt(const PairGemmKernels& k, int64_t M, int64_t N, int64_t K, float alpha,
                  const pair_word* a, int64_t a_rs, int64_t a_ks, const TB* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, const float* bias) {
  const int64_t np = pairs(K), mblocks = (M + kMR - 1) / kMR, panels = (N + kNR - 1) / kNR;
  const int64_t slices = beta == 0.0f ? (np + kSlicePairs - 1) / kSlicePairs : 1;
  const int64_t per_slice = (np + slices - 1) / slices;
  const int64_t bands = std::clamp<int64_t>((2 * omp_get_num_threads() + panels - 1) / panels, 1, mblocks);
  uint32_t* buf = grown(packs().panel, per_slice * kNR);
#pragma omp for schedule(static)
  for (int64_t t = 0; t < panels * bands; ++t) {
    const int64_t j0 = (t / bands) * kNR, band = t % bands;
    const int cols = static_cast<int>(std::min<int64_t>(kNR, N - j0));
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t p0 = s * per_slice, sp = std::min(per_slice, np - p0);
      const int part = (s == 0 ? bf16gemm::kSliceStarts : 0) | (s == slices - 1 ? bf16gemm::kSliceEnds : 0);
      packing(k, B).gather_pairs(B + j0 * ldb + 2 * p0, ldb, cols, std::min(2 * sp, K - 2 * p0), 0,
                                 kNR, buf, kNR);
      for (int64_t blk = band * mblocks / bands; blk < (band + 1) * mblocks / bands; ++blk) {
        const int64_t i0 = blk * kMR;
        k.tile(a + i0 * a_rs + p0 * a_ks, a_rs, a_ks, static_cast<int>(std::min<int64_t>(kMR, M - i0)),
               buf, kNR, sp, cols, alpha, beta, bias ? bias + j0 : nullptr, C + i0 * ldc + j0, ldc,
               part);
      }
    }
  }
}

template <class TA, class TB>
void on_avx512bf16(const PairGemmKernels& k, bool trans_a, bool trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const TA* A_, int64_t lda, const TB* B_, int64_t ldb,
                   float beta, float* C, int64_t ldc, const float* bias) {
  const auto* A = packable(A_);
  const auto* B = packable(B_);
  const int64_t np = pairs(K), Np = (N + kNR - 1) / kNR * kNR;
  Packs& pk = packs();
  // op(A)'s pairs: a(r, p) at a[r * a_rs + p * a_ks]. A bfloat16 A with K and
  // lda even already is its pairs, row by row: used in place.
  const bool in_place = std::is_same_v<TA, bfloat16> && !trans_a && K % 2 == 0 && lda % 2 == 0;
  uint32_t* a = in_place ? nullptr : grown(pk.a, M * np);
  const pair_word* a_words = in_place ? reinterpret_cast<const pair_word*>(A) : a;
  const int64_t a_rs = trans_a ? 1 : in_place ? lda / 2 : np, a_ks = trans_a ? M : 1;
  uint32_t* b = trans_b ? nullptr : grown(pk.b, np * Np);  // op(B)'s pairs (pack_b_pairs)
#pragma omp parallel
  {
    // Packing: rows (or pairs) split between the threads.
    if (trans_a) {
#pragma omp for schedule(static) nowait
      for (int64_t p = 0; p < np; ++p) packing(k, A).interleave_rows(A + 2 * p * lda, lda, std::min<int64_t>(2, K - 2 * p), M, a + p * M, M);
    } else if (!in_place) {
#pragma omp for schedule(static) nowait
      for (int64_t r = 0; r < M; ++r) packing(k, A).rows_to_pairs(A + r * lda, lda, 1, K, a + r * np, np);
    }
    if (trans_b) {
#pragma omp barrier
      panels_of_bt(k, M, N, K, alpha, a_words, a_rs, a_ks, B, ldb, beta, C, ldc, bias);
    } else {
      pack_b_pairs(packing(k, B), false, N, K, B, ldb, b, Np, np);
      chunks_of_b(k, M, N, np, alpha, a_words, a_rs, a_ks, b, Np, beta, C, ldc, bias);
    }
  }
}

// On AMX: op(A) packed row-major in pairs, [M rounded up to 32][np16] with
// zero pairs past K and zero rows past M (op(A) = Aᵀ, the weight gradients:
// pairs gathered across A's rows, transpose_pairs), op(B) as above with zero
// pair rows up to np16, and C in blocks of 32 x 32 (2 x 2 tiles).
template <class TA, class TB>
void on_amx(const PairGemmKernels& k, const AmxGemmKernels& amx, bool trans_a, bool trans_b,
            int64_t M, int64_t N, int64_t K, float alpha, const TA* A_, int64_t lda, const TB* B_,
            int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  const auto* A = packable(A_);
  const auto* B = packable(B_);
  const int64_t np = pairs(K), np16 = (np + 15) / 16 * 16, Np = (N + kNR - 1) / kNR * kNR;
  const int64_t M32 = (M + 31) / 32 * 32;
  Packs& pk = packs();
  uint32_t* a = grown(pk.a, M32 * np16);
  uint32_t* b = grown(pk.b, np16 * Np);
  const int64_t mblocks = M32 / 32, nblocks = (N + 31) / 32;
#pragma omp parallel
  {
    // Sixteen rows of op(A) an item: for Aᵀ, a strip of 16 of A's columns.
#pragma omp for schedule(static) nowait
    for (int64_t r0 = 0; r0 < M32; r0 += 16) {
      const int64_t rows = std::clamp<int64_t>(M - r0, 0, 16);
      if (rows > 0 && trans_a)
        packing(k, A).transpose_pairs(A + r0, lda, K, rows, a + r0 * np16, np16);
      else if (rows > 0)
        packing(k, A).rows_to_pairs(A + r0 * lda, lda, rows, K, a + r0 * np16, np16);
      for (int64_t r = r0; r < r0 + 16; ++r)
        std::fill(a + r * np16 + (r < M ? np : 0), a + (r + 1) * np16, 0u);
    }
    pack_b_pairs(packing(k, B), trans_b, N, K, B, ldb, b, Np, np16);
    amx.begin();
#pragma omp for schedule(static)
    for (int64_t t = 0; t < mblocks * nblocks; ++t) {
      const int64_t i0 = (t / nblocks) * 32, j0 = (t % nblocks) * 32;
      amx.block(a + i0 * np16, np16, b + j0, Np, np16,
                static_cast<int>(std::min<int64_t>(32, M - i0)),
                static_cast<int>(std::min<int64_t>(32, N - j0)), alpha, beta,
                bias ? bias + j0 : nullptr, C + i0 * ldc + j0, ldc);
    }
    amx.end();
  }
}

// An operand's rows [R, K] as bf16 bit patterns, ld apart: a bfloat16 one
// where it lies; a float32 one rounded into `words` (pairs(K) words a row,
// the last high half 0 for an odd K). Call inside a parallel region; the
// caller's barrier ends the rounding.
template <class T>
const uint16_t* bf16_rows(const PairGemmKernels& k, const T* X, int64_t ld, int64_t R, int64_t K,
                          std::vector<uint32_t>& words, int64_t& rows_ld) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    rows_ld = ld;
    return reinterpret_cast<const uint16_t*>(X);
  } else {
    const int64_t np = pairs(K);
    uint32_t* dst = words.data();
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < R; ++r) k.from_f32.rows_to_pairs(X + r * ld, ld, 1, K, dst + r * np, np);
    rows_ld = 2 * np;
    return reinterpret_cast<const uint16_t*>(dst);
  }
}

// Few rows against op(B) = Bᵀ (B [N, K]: a Linear's weight, one output a
// row) on the dot-product kernel, or against op(B) = B (B [K, N], one input
// a row) on its [K, N] counterpart: A's and B's rows as bf16 (rounded once
// here unless given in bfloat16), C's columns cut as sgemm's dot_columns
// cuts them, each element one thread's K sum.
template <class TA, class TB>
void on_dot(const PairGemmKernels& k, const GemmDotKernels& dot, bool trans_b, int64_t M, int64_t N,
            int64_t K, float alpha, const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta,
            float* C, int64_t ldc, const float* bias) {
  Packs& pk = packs();
  // B's rows: N of K elements, or K of N.
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  if constexpr (!std::is_same_v<TA, bfloat16>) grown(pk.a, M * pairs(K));
  if constexpr (!std::is_same_v<TB, bfloat16>) grown(pk.b, b_rows * pairs(b_cols));
  const auto kernel = trans_b ? dot.bf16 : dot.bf16_kn;
  const int64_t block = trans_b ? kDotBlockColumns : kKnBlockColumns;
#pragma omp parallel
  {
    int64_t a_ld = 0, b_ld = 0;
    const uint16_t* a = bf16_rows(k, A, lda, M, K, pk.a, a_ld);
    const uint16_t* b = bf16_rows(k, B, ldb, b_rows, b_cols, pk.b, b_ld);
#pragma omp barrier
    const auto [lo, hi] = dot_range(N, omp_get_thread_num(), omp_get_num_threads(), block);
    if (lo < hi)
      kernel(M, hi - lo, K, alpha, a, a_ld, trans_b ? b + lo * b_ld : b + lo, b_ld, beta,
             bias ? bias + lo : nullptr, C + lo, ldc);
  }
}

// gemm_bf16 and gemm_bf16_bias (bias null: none), for either operand in
// float32 or bfloat16.
template <class TA, class TB>
void run(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const TA* A,
         int64_t lda, const TB* B, int64_t ldb, float beta, float* C, int64_t ldc,
         const float* bias) {
  check_gemm_args("gemm_bf16", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (gemm_without_products(M, N, K, alpha, beta, C, ldc)) {
    if (bias) add_bias(M, N, bias, C, ldc);
    return;
  }
  const IsaKernels& k = isa_kernels(active_isa());
  if (!trans_a && M <= kDotRowsMax && k.gemm_dot && (trans_b ? k.gemm_dot->bf16 : k.gemm_dot->bf16_kn))
    on_dot(*k.gemm_pairs, *k.gemm_dot, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  else if (k.gemm_amx)
    on_amx(*k.gemm_pairs, *k.gemm_amx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
           ldc, bias);
  else if (k.gemm_pairs)
    on_avx512bf16(*k.gemm_pairs, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                  bias);
  else
    widened(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bfloat16* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const bfloat16* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    const float* bias, float* C, int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const bfloat16* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    const float* bias, float* C, int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const bfloat16* B, int64_t ldb, float beta,
                    const float* bias, float* C, int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const bfloat16* A, int64_t lda, const bfloat16* B, int64_t ldb, float beta,
                    const float* bias, float* C, int64_t ldc) {
  run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                   int64_t ldc) {
  check_gemm_args("gemm_bf16", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) a[i * K + k] = round_bf16(trans_a ? A[k * lda + i] : A[i * lda + k]);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) b[k * N + j] = round_bf16(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
  sgemm_ref(false, false, M, N, K, alpha, a.data(), std::max<int64_t>(1, K), b.data(),
            std::max<int64_t>(1, N), beta, C, ldc);
}

}  // namespace qkv::linalg
