// weight_matmul (qkv/weight.h) on every path this CPU runs, for every weight
// type: each output within the stated bound of the float64 product of x
// and the reference-dequantized row, at 1, few and many rows; exact
// activations leave only float rounding; the same bits for any thread
// count; the path's dequantizers give the reference's bits; runs of mixed
// types equal to their separate products; NaN in, NaN out; and the sizes
// it refuses.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "isa_fixture.h"
#include "linalg/half.h"
#include "linalg/quant_dot.h"
#include "qkv/error.h"
#include "qkv/weight.h"

using qkv::Weight;
using qkv::WeightType;

namespace {

constexpr WeightType kTypes[] = {WeightType::f32,  WeightType::f16,  WeightType::bf16,
                                 WeightType::q8_0, WeightType::q4_0, WeightType::q5_0,
                                 WeightType::q5_1, WeightType::q4_k, WeightType::q5_k,
                                 WeightType::q6_k};

// rows x cols weights of type t: random bytes, each block's f16 scales set
// to random positive values in [lo, 2 lo) (positive, so that a K-quant's
// two terms can be told apart below); float types random normal.
std::vector<uint8_t> random_weights(WeightType t, int64_t rows, int64_t cols, std::mt19937& gen, float lo = 0.002f) {
  const qkv::WeightTypeInfo& info = qkv::weight_type_info(t);
  std::vector<uint8_t> b(qkv::weight_bytes(t, rows * cols));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(lo, 2 * lo);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  if (info.block == 1) {
    std::vector<float> f(static_cast<size_t>(rows * cols));
    for (float& v : f) v = normal(gen);
    for (size_t i = 0; i < f.size(); ++i) {
      if (t == WeightType::f32) std::memcpy(&b[4 * i], &f[i], 4);
      uint32_t bits;
      std::memcpy(&bits, &f[i], 4);
      const uint16_t h = t == WeightType::f16 ? qkv::linalg::half_from_float(f[i]) : static_cast<uint16_t>(bits >> 16);
      if (t != WeightType::f32) qkv::linalg::put_f16(&b[2 * i], h);
    }
    return b;
  }
  for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen));
  for (size_t at = 0; at < b.size(); at += info.block_bytes) {
    auto put = [&](size_t off) { qkv::linalg::put_f16(&b[at + off], qkv::linalg::half_from_float(scale(gen))); };
    if (t == WeightType::q6_k) put(208);
    else put(0);
    if (t == WeightType::q4_k || t == WeightType::q5_k || t == WeightType::q5_1) put(2);  // dmin, or Q5_1's m
  }
  return b;
}

std::vector<float> dequantized_row(const Weight& w, int64_t r) {
  std::vector<float> out(static_cast<size_t>(w.cols));
  qkv::dequantize_row(w.type, w.row(r), out.data(), w.cols);
  return out;
}

// Per weight, the size of the largest term its products involve: |w|, or
// for Q4_K and Q5_K (d sc) q + dmin m, both parts positive (the block with
// dmin's sign flipped), so that the bound covers the float rounding of
// the two terms before they cancel.
std::vector<double> magnitudes(const Weight& w, int64_t r) {
  const std::vector<float> v = dequantized_row(w, r);
  std::vector<double> mag(v.size());
  if (w.type == WeightType::q4_k || w.type == WeightType::q5_k) {
    std::vector<uint8_t> row(w.row(r), w.row(r) + w.row_bytes());
    const size_t block = qkv::weight_type_info(w.type).block_bytes;
    for (size_t at = 0; at < row.size(); at += block) row[at + 3] ^= 0x80;
    std::vector<float> flipped(v.size());
    qkv::dequantize_row(w.type, row.data(), flipped.data(), w.cols);
    for (size_t k = 0; k < v.size(); ++k) mag[k] = std::fabs(flipped[k]);
    return mag;
  }
  double top = 0;
  for (float x : v) top = std::max(top, std::fabs(static_cast<double>(x)));
  for (size_t k = 0; k < v.size(); ++k) mag[k] = std::fabs(v[k]) + (w.type == WeightType::q6_k ? top : 0.0);
  return mag;
}

// The bound of qkv/weight.h for output (row r of w, activations x): half a
// step of x's block scale (amax / 127; a Q8_0 scale, an f16, may be off by
// 2^-11 of itself at 127 steps) times the block's Σ|w|, plus 2^-16 of
// Σ|x| · magnitude for the float32 sums.
double bound(const Weight& w, int64_t r, const float* x) {
  const std::vector<float> v = dequantized_row(w, r);
  const std::vector<double> mag = magnitudes(w, r);
  int64_t bx = 0;
  double slack = 0.5;
  // Q5_1's q d + m (both positive here) is one weight times x's rounding.
  if (w.type == WeightType::q8_0 || w.type == WeightType::q4_0 || w.type == WeightType::q5_0 ||
      w.type == WeightType::q5_1)
    bx = 32, slack += 127.0 / 2048;
  if (w.type == WeightType::q4_k || w.type == WeightType::q5_k || w.type == WeightType::q6_k) bx = 256;
  double b = 0;
  for (int64_t k0 = 0; bx && k0 < w.cols; k0 += bx) {
    double amax = 0, sw = 0;
    for (int64_t k = k0; k < k0 + bx; ++k) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[k])));
      sw += std::fabs(static_cast<double>(v[static_cast<size_t>(k)]));
    }
    b += slack * amax / 127 * sw;
  }
  double sm = 0;
  for (int64_t k = 0; k < w.cols; ++k) sm += std::fabs(static_cast<double>(x[k])) * mag[static_cast<size_t>(k)];
  return b + sm * std::ldexp(1.0, -16);
}

double product(const Weight& w, int64_t r, const float* x) {
  const std::vector<float> v = dequantized_row(w, r);
  double s = 0;
  for (int64_t k = 0; k < w.cols; ++k) s += static_cast<double>(v[static_cast<size_t>(k)]) * x[k];
  return s;
}

std::vector<float> random_x(int64_t M, int64_t K, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K));
  for (float& v : x) v = normal(gen);
  for (int64_t i = 0; i < M; ++i) x[static_cast<size_t>(i * K)] *= 8;  // an outlier in each row, as real activations have
  return x;
}

class WeightMatmul : public qkv::test::OnIsa {};

// Every type, every shape class: 1 row (a decoded token), few, many; a
// K of one block, of several, of an odd number (the kernels that take two
// blocks a step end on one); N not a multiple of the threads' tiles.
TEST_P(WeightMatmul, WithinTheBoundOfTheDequantizedProduct) {
  std::mt19937 gen(11);
  for (WeightType t : kTypes)
    for (int64_t K : {32, 96, 256, 512, 800, 1024})
      for (int64_t M : {1, 3, 19}) {
        if (K % qkv::weight_type_info(t).block) continue;
        const int64_t N = 37;
        const std::vector<uint8_t> bytes = random_weights(t, N, K, gen);
        const Weight w{t, N, K, bytes.data()};
        const std::vector<float> x = random_x(M, K, gen);
        std::vector<float> bias(N), out(static_cast<size_t>(M * N));
        for (int64_t j = 0; j < N; ++j) bias[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j);
        qkv::weight_matmul(out.data(), x.data(), M, K, {&w, 1}, bias.data());
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const float* xi = x.data() + i * K;
            const double want = product(w, j, xi) + bias[static_cast<size_t>(j)];
            ASSERT_NEAR(out[static_cast<size_t>(i * N + j)], want, bound(w, j, xi) + 1e-6)
                << qkv::weight_type_info(t).name << " K " << K << " M " << M << " (" << i << ", " << j << ")";
          }
      }
}

// Activations that quantize exactly (integers up to 127 with 127 in every
// block: the scale is 1) leave only the float32 sums: any misplaced weight,
// scale or min would show far beyond 2^-16. One row of x (a decode step),
// five (a short prompt's, which tiles of rows take where the path has
// them) and 17 (a long one's, which panels take where the path has them),
// an even and an odd number of blocks of 32.
TEST_P(WeightMatmul, ExactActivationsLeaveOnlyFloatRounding) {
  std::mt19937 gen(12);
  std::uniform_int_distribution<int> q(-127, 127);
  const int64_t N = 9;
  for (int64_t K : {512, 544}) {
    for (int64_t M : {1, 5, 17}) {
      std::vector<float> x(static_cast<size_t>(M * K));
      for (size_t k = 0; k < x.size(); ++k) x[k] = k % 32 == 5 ? 127.0f : static_cast<float>(q(gen));
      for (WeightType t : kTypes) {
        if (K % qkv::weight_type_info(t).block) continue;
        const std::vector<uint8_t> bytes = random_weights(t, N, K, gen);
        const Weight w{t, N, K, bytes.data()};
        std::vector<float> out(static_cast<size_t>(M * N));
        qkv::weight_matmul(out.data(), x.data(), M, K, {&w, 1}, nullptr);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            const float* xi = x.data() + i * K;
            double sm = 0;
            const std::vector<double> mag = magnitudes(w, j);
            for (int64_t k = 0; k < K; ++k) sm += std::fabs(xi[k]) * mag[static_cast<size_t>(k)];
            ASSERT_NEAR(out[static_cast<size_t>(i * N + j)], product(w, j, xi), sm * std::ldexp(1.0, -16))
                << qkv::weight_type_info(t).name << " K " << K << " M " << M << " (" << i << ", " << j << ")";
          }
      }
    }
  }
}

TEST_P(WeightMatmul, SameBitsForAnyThreadCount) {
  std::mt19937 gen(13);
  const int64_t K = 512, N = 131;
  const int before = omp_get_max_threads();
  for (int64_t M : {5, 20}) {  // 20: panels, where the path has them
    for (WeightType t : kTypes) {
      const std::vector<uint8_t> bytes = random_weights(t, N, K, gen);
      const Weight w{t, N, K, bytes.data()};
      const std::vector<float> x = random_x(M, K, gen);
      std::vector<float> one(static_cast<size_t>(M * N)), many(one.size());
      omp_set_num_threads(1);
      qkv::weight_matmul(one.data(), x.data(), M, K, {&w, 1}, nullptr);
      for (int threads : {2, 3, 4}) {
        omp_set_num_threads(threads);
        qkv::weight_matmul(many.data(), x.data(), M, K, {&w, 1}, nullptr);
        ASSERT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
            << qkv::weight_type_info(t).name << " M " << M << " on " << threads << " threads";
      }
    }
  }
  omp_set_num_threads(before);
}

// The first row of x reads the weight rows one a call, the later rows four
// a call, or four rows of x at a time where the path has tiles: row i's
// outputs are the bits it gets alone, whatever its place.
TEST_P(WeightMatmul, EachRowOfXGetsTheBitsItGetsAlone) {
  std::mt19937 gen(17);
  const int64_t N = 131, M = 9;
  for (int64_t K : {512, 544})  // 544: an odd number of blocks of 32
    for (WeightType t : kTypes) {
      if (K % qkv::weight_type_info(t).block) continue;
      const std::vector<uint8_t> bytes = random_weights(t, N, K, gen);
      const Weight w{t, N, K, bytes.data()};
      const std::vector<float> x = random_x(M, K, gen);
      std::vector<float> all(static_cast<size_t>(M * N)), alone(static_cast<size_t>(N));
      qkv::weight_matmul(all.data(), x.data(), M, K, {&w, 1}, nullptr);
      for (int64_t i = 0; i < M; ++i) {
        qkv::weight_matmul(alone.data(), x.data() + i * K, 1, K, {&w, 1}, nullptr);
        ASSERT_EQ(0, std::memcmp(alone.data(), all.data() + i * N, alone.size() * sizeof(float)))
            << qkv::weight_type_info(t).name << ", row " << i << " of x";
      }
    }
}

// From 16 rows of x the weights go by panels where the path has them, four
// rows of x a call and a remainder: row i's outputs are the same bits
// wherever it stands among the others.
TEST_P(WeightMatmul, EachRowOfAPromptGetsTheSameBitsAnywhere) {
  std::mt19937 gen(18);
  const int64_t N = 131, M = 19, K = 512;
  for (WeightType t : kTypes) {
    const std::vector<uint8_t> bytes = random_weights(t, N, K, gen);
    const Weight w{t, N, K, bytes.data()};
    const std::vector<float> x = random_x(M, K, gen);
    std::vector<float> all(static_cast<size_t>(M * N)), moved(all.size()), x_moved(x.size());
    qkv::weight_matmul(all.data(), x.data(), M, K, {&w, 1}, nullptr);
    for (int64_t shift : {1, 2, 3, 5}) {  // row i of x at (i + shift) % M
      for (int64_t i = 0; i < M; ++i)
        std::copy_n(x.data() + i * K, K, x_moved.data() + (i + shift) % M * K);
      qkv::weight_matmul(moved.data(), x_moved.data(), M, K, {&w, 1}, nullptr);
      for (int64_t i = 0; i < M; ++i)
        ASSERT_EQ(0, std::memcmp(all.data() + i * N, moved.data() + (i + shift) % M * N, sizeof(float) * N))
            << qkv::weight_type_info(t).name << ", row " << i << " of x moved by " << shift;
    }
  }
}

// q, k and v of a Q4_K_M file are three tensors, of two types: one matrix.
// Here four runs: panels of two sizes (Q8_0's blocks of 32, the K-quants'
// of 256) beside an F16 run, which has none.
TEST_P(WeightMatmul, RunsOfMixedTypesAreOneMatrix) {
  std::mt19937 gen(14);
  const int64_t K = 256, N = 24;
  const std::vector<uint8_t> a = random_weights(WeightType::q4_k, 10, K, gen),
                             b = random_weights(WeightType::q6_k, 3, K, gen),
                             c = random_weights(WeightType::f16, 6, K, gen),
                             d = random_weights(WeightType::q8_0, 5, K, gen);
  const Weight runs[] = {{WeightType::q4_k, 10, K, a.data()},
                         {WeightType::q6_k, 3, K, b.data()},
                         {WeightType::f16, 6, K, c.data()},
                         {WeightType::q8_0, 5, K, d.data()}};
  // M = 6: tiles of 4 rows of x where the path has them, then 2; M = 18:
  // panels of the quantized runs, tiles of the f16 one.
  for (int64_t M : {6, 18}) {
    const std::vector<float> x = random_x(M, K, gen);
    std::vector<float> bias(N, 0.5f), whole(static_cast<size_t>(M * N));
    qkv::weight_matmul(whole.data(), x.data(), M, K, runs, bias.data());
    int64_t j0 = 0;
    for (const Weight& run : runs) {
      std::vector<float> part(static_cast<size_t>(M * run.rows));
      qkv::weight_matmul(part.data(), x.data(), M, K, {&run, 1}, bias.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < run.rows; ++j)
          ASSERT_EQ(whole[static_cast<size_t>(i * N + j0 + j)], part[static_cast<size_t>(i * run.rows + j)])
              << qkv::weight_type_info(run.type).name << " M " << M;
      j0 += run.rows;
    }
  }
}

TEST_P(WeightMatmul, NonFiniteActivationsGiveNaN) {
  std::mt19937 gen(15);
  const int64_t K = 256;
  for (WeightType t : kTypes) {
    const std::vector<uint8_t> bytes = random_weights(t, 4, K, gen);
    const Weight w{t, 4, K, bytes.data()};
    for (int64_t M : {1, 16})  // a decode step's row; a prompt's, by panels where the path has them
      for (float bad : {NAN, INFINITY}) {
        std::vector<float> x = random_x(M, K, gen), out(static_cast<size_t>(4 * M));
        x[static_cast<size_t>((M - 1) * K + 100)] = bad;
        qkv::weight_matmul(out.data(), x.data(), M, K, {&w, 1}, nullptr);
        for (int64_t i = 0; i < M; ++i)  // the bad row's outputs NaN, the others' numbers
          for (int c = 0; c < 4; ++c) {
            const float v = out[static_cast<size_t>(i * 4 + c)];
            if (i < M - 1) EXPECT_TRUE(std::isfinite(v)) << qkv::weight_type_info(t).name << " M " << M << " row " << i;
            else EXPECT_TRUE(std::isnan(v) || (std::isinf(v) && std::isinf(bad))) << qkv::weight_type_info(t).name << " M " << M << " " << v;
          }
      }
  }
}

// The long prompts' GEMM reads the weights dequantized by the path's own
// code: the reference dequantizer's bits, every type, rows anywhere.
TEST_P(WeightMatmul, DequantizedRowsAreTheReferenceBits) {
  std::mt19937 gen(16);
  const int64_t K = 512, N = 7;
  for (WeightType t : kTypes) {
    const std::vector<uint8_t> bytes = random_weights(t, N, K, gen);
    const Weight w{t, N, K, bytes.data()};
    std::vector<float> got(static_cast<size_t>(3 * K));
    qkv::dequantize_rows(w, 2, 3, got.data());
    for (int64_t r = 0; r < 3; ++r) {
      const std::vector<float> want = dequantized_row(w, 2 + r);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data() + r * K, sizeof(float) * static_cast<size_t>(K)))
          << qkv::weight_type_info(t).name << " row " << 2 + r;
    }
  }
  std::vector<float> out(K);
  EXPECT_THROW(qkv::dequantize_rows(Weight{WeightType::q8_0, N, K, nullptr}, 6, 2, out.data()), qkv::Error);
}

// The path's quantizers of activations give the reference's bits: random
// rows at scales from subnormal to past f16's range, blocks of zeros, a
// non-finite value, and exact ties of x / d (a block whose largest
// magnitude is 127 has d = 1), which Q8_0 rounds away from zero and Q8_K
// to even, with their neighbours a float away.
TEST_P(WeightMatmul, ActivationQuantizersAreTheReferenceBits) {
  std::mt19937 gen(17);
  const int64_t K = 1024;
  std::vector<std::vector<float>> rows;
  // 1e-38: blocks whose 1 / d is inf (a largest magnitude under 2^-121);
  // 1e-30: Q8_0 scales under f16's smallest.
  for (float scale : {1e-38f, 1e-30f, 1e-6f, 1.0f, 3e3f, 1e7f}) {
    std::vector<float> x = random_x(1, K, gen);
    for (float& v : x) v *= scale;
    x[5] = 0.0f, x[300] = -0.0f;  // 0 * inf is NaN
    rows.push_back(x);
  }
  std::vector<float> ties(K, 0.0f);  // every block's largest magnitude 127: d = 1 in both
  for (int64_t k = 0; k < K; ++k) {
    const float tie = static_cast<float>(k % 254 - 127) + 0.5f;  // -126.5 .. 126.5
    ties[static_cast<size_t>(k)] = k % 3 == 0 ? tie : k % 3 == 1 ? std::nextafter(tie, 0.0f) : std::nextafter(tie, 200.0f);
    if (k % 32 == 31) ties[static_cast<size_t>(k)] = 127.0f;
  }
  rows.push_back(ties);
  rows.push_back(std::vector<float>(K, 0.0f));
  std::vector<float> bad = random_x(1, K, gen);
  bad[40] = NAN;
  bad[600] = -INFINITY;
  rows.push_back(bad);
  const qkv::linalg::DotKernels& k = qkv::linalg::dot_kernels();
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<uint8_t> want(K / 32 * 34), got(want.size());
    qkv::linalg::quantize_q8_0_x(rows[r].data(), want.data(), K);
    k.quantize_x8_0(rows[r].data(), got.data(), K);
    EXPECT_EQ(want, got) << "Q8_0, row " << r;
    std::vector<qkv::linalg::BlockQ8K> want_k(K / 256), got_k(K / 256);
    qkv::linalg::quantize_q8_k(rows[r].data(), want_k.data(), K);
    k.quantize_x8_k(rows[r].data(), got_k.data(), K);
    EXPECT_EQ(0, std::memcmp(want_k.data(), got_k.data(), want_k.size() * sizeof(qkv::linalg::BlockQ8K))) << "Q8_K, row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, WeightMatmul, ::testing::ValuesIn(qkv::all_isas()), qkv::test::isa_test_name);

// The tests above run each path's kernels: from avx512 up, AVX512-VNNI's
// on a CPU with it and AVX2's on one without; below avx512, AVX2's.
TEST(WeightMatmulKernels, EachPathTakesTheKernelsOfItsFeatures) {
  const qkv::Isa before = qkv::active_isa();
  for (qkv::Isa isa : qkv::available_isas()) {
    qkv::set_isa(isa);
    const bool vnni = isa >= qkv::Isa::avx512 && qkv::cpu_has(qkv::CpuFeature::avx512_vnni);
    EXPECT_STREQ(qkv::linalg::dot_kernels_name(), vnni ? "avx512vnni" : isa == qkv::Isa::avx2 ? "avx2" : "scalar")
        << qkv::isa_name(isa);
    // Its tiles and panels of rows of x, which the tests above reach from
    // M = 4 and M = 16 up.
    for (WeightType t : kTypes)
      EXPECT_EQ(qkv::weight_matmul_tiles(t), vnni && (t == WeightType::q8_0 || t == WeightType::q4_0 || t == WeightType::q4_k ||
                                                     t == WeightType::q5_k || t == WeightType::q6_k))
          << qkv::isa_name(isa) << " " << qkv::weight_type_info(t).name;
  }
  qkv::set_isa(before);
}

// The AVX512-VNNI kernels exist on CPUs that have it; elsewhere the tests
// above cannot reach them, and this says so by name.
TEST(WeightMatmulKernels, Avx512VnniRunsHere) {
  if (!qkv::cpu_has(qkv::CpuFeature::avx512_vnni))
    GTEST_SKIP() << "this CPU cannot run the " << qkv::feature_name(qkv::CpuFeature::avx512_vnni) << " kernels";
  const qkv::Isa before = qkv::active_isa();
  qkv::set_isa(qkv::Isa::avx512);
  EXPECT_STREQ(qkv::linalg::dot_kernels_name(), "avx512vnni");
  qkv::set_isa(before);
}

TEST(WeightMatmulChecks, RefusesSizesItCannotRun) {
  std::vector<uint8_t> bytes(qkv::weight_bytes(WeightType::q4_k, 2 * 256));
  float x[512] = {}, out[4] = {};
  const Weight w{WeightType::q4_k, 2, 256, bytes.data()};
  EXPECT_THROW(qkv::weight_matmul(out, x, 1, 512, {&w, 1}, nullptr), qkv::Error);  // cols != K
  const Weight odd{WeightType::q4_k, 1, 300, bytes.data()};
  try {
    qkv::weight_matmul(out, x, 1, 300, {&odd, 1}, nullptr);
    FAIL() << "a K that is not a multiple of the block was taken";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(qkv::weight_matmul(out, x, -1, 256, {&w, 1}, nullptr), qkv::Error);
}

}  // namespace
