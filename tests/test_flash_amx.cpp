// The AMX tile kernels of the bf16 prefill (core/kernels/flash_amx.h), called
// directly against float64 transcriptions of their contracts:
// - pack_vt_bf16 (AVX-512 code: runs wherever the avx512 path does) against
//   a plain transpose, with key and value counts off its 32 x 16 blocks;
// - qk_bf16_amx and pv_bf16_amx (AMX only; skipped by name elsewhere), with
//   NaN in every K row, V key and weight pair past the tile, which the
//   kernels must never read (a weight of 0 times NaN is NaN).
// The whole path through attention() runs in test_attention_bf16 (amx).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/kernels/flash_amx.h"
#include "core/kernels/flash_bf16.h"
#include "qkv/runtime.h"
#include "qkv/tensor.h"

using namespace qkv;
using kernels::kBC;
using kernels::kBR;

namespace {

constexpr uint16_t kNaN16 = 0x7fc0;

uint16_t random_bf16(std::mt19937& rng) {
  std::normal_distribution<float> normal;
  return bf16_from_float(normal(rng)).bits;
}
double value(uint16_t bits) { return static_cast<double>(bf16_to_float(bfloat16{bits})); }

// Skipped by name where the CPU (or the OS) has no AMX: the tile
// instructions would fault.
class AmxTiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (detected_isa() < Isa::amx) GTEST_SKIP() << "AMX-BF16 not on this CPU (or not granted by the OS)";
  }
};

TEST(PackVt, IsTheTransposeOfV) {
  if (detected_isa() < Isa::avx512) GTEST_SKIP() << "AVX-512 not on this CPU";
  std::mt19937 rng(3);
  for (int64_t nj : {1, 31, 32, 33, 64})
    for (int64_t Dv : {16, 32, 40, 128}) {
      SCOPED_TRACE(::testing::Message() << "nj " << nj << " Dv " << Dv);
      const int64_t ldv = Dv + 3, ldt = nj + 5;
      std::vector<uint16_t> V(nj * ldv), Vt(Dv * ldt, 0xabcd);
      for (uint16_t& x : V) x = static_cast<uint16_t>(rng());
      kernels::pack_vt_bf16(Vt.data(), ldt, V.data(), ldv, nj, Dv);
      for (int64_t e = 0; e < Dv; ++e) {
        for (int64_t j = 0; j < nj; ++j) ASSERT_EQ(Vt[e * ldt + j], V[j * ldv + e]) << e << " " << j;
        for (int64_t j = nj; j < ldt; ++j) ASSERT_EQ(Vt[e * ldt + j], 0xabcd) << "wrote past nj";
      }
    }
}

// The tiles sum each dot product in float32 in their own order: within a few
// ulps of the sum of absolute products.
double dot_tolerance(double abs_sum, int64_t terms) {
  return 0x1p-23 * static_cast<double>(terms) * abs_sum + 1e-30;
}

TEST_F(AmxTiles, QkMatchesItsContract) {
  std::mt19937 rng(5);
  for (int64_t D : {32, 64, 128})
    for (int64_t nj : {1, 15, 16, 17, 40, 64})
      for (int ncols : {5, 16, 17, 40, 64}) {
        SCOPED_TRACE(::testing::Message() << "D " << D << " nj " << nj << " ncols " << ncols);
        const int64_t ldk = D + 8;
        // K rows past nj (up to the next 16) hold NaN: never to be read.
        std::vector<uint16_t> K((nj + 16) * ldk, kNaN16), kpad(16 * D);
        for (int64_t j = 0; j < nj; ++j)
          for (int64_t d = 0; d < D; ++d) K[j * ldk + d] = random_bf16(rng);
        std::vector<uint32_t> Qt2(D / 2 * kBR, 0);  // padding columns zero
        for (int64_t t = 0; t < D / 2; ++t)
          for (int i = 0; i < ncols; ++i)
            Qt2[t * kBR + i] = random_bf16(rng) | static_cast<uint32_t>(random_bf16(rng)) << 16;
        std::vector<float> St(kBC * kBR, NAN);
        const float scale = 0.125f;
        kernels::amx_tiles_on();
        kernels::qk_bf16_amx(St.data(), K.data(), ldk, nj, Qt2.data(), D, ncols, scale, kpad.data());
        kernels::amx_tiles_off();
        const int64_t rows16 = (nj + 15) / 16 * 16;
        for (int64_t j = 0; j < rows16; ++j)
          for (int i = 0; i < (ncols + 15) / 16 * 16; ++i) {
            double want = 0, abs_sum = 0;
            for (int64_t d = 0; j < nj && d < D; ++d) {
              const uint32_t w = Qt2[d / 2 * kBR + i];
              const double prod = value(K[j * ldk + d]) * value(static_cast<uint16_t>(d % 2 ? w >> 16 : w));
              want += prod;
              abs_sum += std::fabs(prod);
            }
            if (j >= nj) {
              ASSERT_EQ(St[j * kBR + i], 0.0f) << "row past nj " << j;
              continue;
            }
            ASSERT_NEAR(St[j * kBR + i], scale * want, scale * dot_tolerance(abs_sum, D)) << j << " " << i;
          }
        for (int64_t j = 0; j < kBC; ++j)
          for (int i = j < rows16 ? (ncols + 15) / 16 * 16 : 0; i < kBR; ++i)
            ASSERT_TRUE(std::isnan(St[j * kBR + i])) << "wrote past its rows or columns: " << j << " " << i;
      }
}

TEST_F(AmxTiles, PvMatchesItsContract) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int64_t Dv : {16, 48, 128})
    for (int64_t nj : {1, 7, 31, 32, 33, 64})
      for (int ncols : {5, 16, 17, 64}) {
        SCOPED_TRACE(::testing::Message() << "Dv " << Dv << " nj " << nj << " ncols " << ncols);
        const int64_t ldt = 96;  // keys past nj hold NaN
        std::vector<uint16_t> Vt(Dv * ldt, kNaN16), vpad(Dv * 32);
        for (int64_t e = 0; e < Dv; ++e)
          for (int64_t j = 0; j < nj; ++j) Vt[e * ldt + j] = random_bf16(rng);
        // Weight pairs for the tile's keys; NaN words past them (the kernel
        // zeroes those rows), and a zero high half for an odd last key.
        std::vector<uint32_t> P2(kBC / 2 * kBR, 0x7fc07fc0u);
        std::vector<double> P(nj * kBR, 0.0);
        for (int64_t j = 0; j < nj; ++j)
          for (int i = 0; i < kBR; ++i) {
            const uint16_t w = bf16_from_float(unit(rng)).bits;
            P[j * kBR + i] = value(w);
            uint32_t& word = P2[j / 2 * kBR + i];
            if (j % 2 == 0) word = w;  // high half 0 unless key j + 1 follows
            else word |= static_cast<uint32_t>(w) << 16;
          }
        std::vector<float> Ot(Dv * kBR), alpha(kBR);
        for (float& x : Ot) x = unit(rng);
        for (float& a : alpha) a = unit(rng);
        const std::vector<float> Ot0 = Ot;
        kernels::amx_tiles_on();
        kernels::pv_bf16_amx(Ot.data(), P2.data(), nj, ncols, Vt.data(), ldt, Dv, alpha.data(),
                             vpad.data());
        kernels::amx_tiles_off();
        for (int64_t e = 0; e < Dv; ++e)
          for (int i = 0; i < (ncols + 15) / 16 * 16; ++i) {
            double want = static_cast<double>(alpha[i]) * Ot0[e * kBR + i], abs_sum = std::fabs(want);
            for (int64_t j = 0; j < nj; ++j) {
              const double prod = P[j * kBR + i] * value(Vt[e * ldt + j]);
              want += prod;
              abs_sum += std::fabs(prod);
            }
            ASSERT_NEAR(Ot[e * kBR + i], want, dot_tolerance(abs_sum, nj + 1)) << e << " " << i;
          }
        for (int64_t e = 0; e < Dv; ++e)
          for (int i = (ncols + 15) / 16 * 16; i < kBR; ++i)
            ASSERT_EQ(Ot[e * kBR + i], Ot0[e * kBR + i]) << "column past ncols " << i;
      }
}

}  // namespace
