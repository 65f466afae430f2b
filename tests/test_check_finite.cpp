// test_check_finite.cpp: check_finite in decode, where the fast kernel scans
// K and V tile by tile as it reads them (a separate pass would double
// decode's time). On every instruction set and in float32 and bf16:
//   - a NaN or Inf in a key or value the kernel reads is named exactly as
//     the up-front scan names it;
//   - scores that overflow float32 send the problem to the reference (the
//     fast result is redone, not returned);
//   - keys no query can see (past key_lengths) are not read, so not checked.
#include <gtest/gtest.h>

#include "isa_fixture.h"

#include <cmath>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>

#include "qkv/attention.h"
#include "qkv/runtime.h"
#include "random_inputs.h"

namespace qkv {

namespace {

using test_inputs::normal;

// q [1, 8, 1, 64], k and v [1, 2, 3000, 64]: decode, GQA 8/2, six chunks.
struct Decode {
  Tensor q, k, v;
  explicit Decode(DType dt) {
    std::mt19937_64 gen(3);
    q = normal({1, 8, 1, 64}, gen, dt);
    k = normal({1, 2, 3000, 64}, gen, dt);
    v = normal({1, 2, 3000, 64}, gen, dt);
  }
};

// Sets element i of t (float32 or bf16) to x.
void put(Tensor& t, int64_t i, float x) {
  if (t.dtype() == DType::bf16)
    t.data<bfloat16>()[i] = bf16_from_float(x);
  else
    t.data<float>()[i] = x;
}

std::string error_of(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  try {
    attention(q, k, v, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class FusedScan : public qkv::test::OnIsa {};

TEST_P(FusedScan, NamesTheFirstBadValueAsTheUpFrontScanDoes) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    AttentionOptions o;
    o.kernel = Kernel::fast;
    {
      Decode d(dt);
      put(d.k, (1 * 3000 + 2500) * 64 + 7, NAN);  // [0, 1, 2500, 7], in the fifth chunk
      put(d.k, (1 * 3000 + 2900) * 64 + 1, INFINITY);
      EXPECT_EQ(error_of(d.q, d.k, d.v, o), "k: values must be finite, found NaN at [0, 1, 2500, 7]");
    }
    {
      Decode d(dt);
      put(d.v, 17 * 64 + 63, -INFINITY);
      EXPECT_EQ(error_of(d.q, d.k, d.v, o), "v: values must be finite, found -inf at [0, 0, 17, 63]");
    }
  }
}

// A key of 3e38s: its float32 dot products overflow. The fast result is
// redone on the reference (bitwise its result), never returned. A key of
// 1e37s: scores near 1e37, finite in float32, stay on the fast kernel and
// are right.
TEST_P(FusedScan, ScoresBeyondFloat32GoToTheReference) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (float big : {3e38f, 1e37f}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " key of " + std::to_string(big));
      Decode d(dt);
      for (int64_t e = 0; e < 64; ++e) put(d.k, 1234 * 64 + e, e % 2 ? big : -big);
      AttentionOptions o;
      o.kernel = Kernel::fast;
      const AttentionResult got = attention(d.q, d.k, d.v, o);
      o.kernel = Kernel::reference;
      const AttentionResult ref = attention(d.q, d.k, d.v, o);
      ASSERT_EQ(got.out.nbytes(), ref.out.nbytes());
      if (big > 1e38f) {
        EXPECT_EQ(std::memcmp(got.out.raw(), ref.out.raw(), ref.out.nbytes()), 0)
            << "the fast kernel's result was returned";
      } else {
        double scale = 0;  // bf16's rounding of weights and output, against the largest output
        for (int64_t i = 0; i < ref.out.numel(); ++i) scale = std::max(scale, std::fabs(ref.out.get(i)));
        for (int64_t i = 0; i < ref.out.numel(); ++i)
          ASSERT_NEAR(got.out.get(i), ref.out.get(i), 0x1p-7 * scale) << i;
      }
    }
  }
}

TEST_P(FusedScan, KeysNoQueryCanSeeAreNotRead) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Decode d(dt), clean(dt);
    for (int64_t i = 2000 * 64; i < 3000 * 64; ++i) put(d.k, i, NAN);  // a cache's unwritten tail
    AttentionOptions o;
    o.kernel = Kernel::fast;
    o.key_lengths = {2000};
    const AttentionResult got = attention(d.q, d.k, d.v, o);
    const AttentionResult want = attention(clean.q, clean.k, clean.v, o);
    EXPECT_EQ(std::memcmp(got.out.raw(), want.out.raw(), want.out.nbytes()), 0);
    // The reference reads every key: its up-front scan still refuses them.
    o.kernel = Kernel::reference;
    EXPECT_NE(error_of(d.q, d.k, d.v, o).find("k: values must be finite, found NaN at [0, 0, 2000, 0]"),
              std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FusedScan,
                         ::testing::ValuesIn(all_isas()),
                         qkv::test::isa_test_name);

// Every size and option check comes before the finiteness scan, which reads
// every element: a broadcast view of 2^36 rows (one real element) is refused
// at once by the size of its result, not scanned for minutes first; and a
// bad option is refused before a NaN is looked for.
TEST(CheckOrder, SizesAndOptionsBeforeTheScan) {
  const double one = 0.0;
  const TensorView q(&one, DType::f64, {1, 1, int64_t{1} << 36, 1}, {0, 0, 0, 0});
  const double kv[3] = {0.0, 0.0, 0.0};
  const TensorView k(kv, DType::f64, {1, 1, 3, 1}), v(kv, DType::f64, {1, 1, 3, 1});
  const auto t0 = std::chrono::steady_clock::now();
  try {
    attention(q, k, v, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out [1, 1, 68719476736, 1] float64 would take"),
              std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);

  const double nan = std::nan("");
  const TensorView qn(&nan, DType::f64, {1, 1, 1, 1});
  AttentionOptions o;
  o.softcap = -1;
  try {
    attention(qn, k, v, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softcap"), std::string::npos) << e.what();
  }
}

TEST(CheckOrder, ThreadsAreCappedInTheLibrary) {
  const double x[4] = {1, 2, 3, 4};
  const TensorView t(x, DType::f64, {1, 1, 2, 2});
  for (int threads : {max_threads() + 1, 40000, 100000}) {
    AttentionOptions o;
    o.threads = threads;
    try {
      attention(t, t, t, o);
      FAIL() << threads;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("threads: expected an integer from 0 (all cores) to "),
                std::string::npos) << e.what();
    }
    EXPECT_THROW(ThreadScope scope(threads), Error);
    EXPECT_THROW(check_threads(threads), Error);
  }
  EXPECT_NO_THROW(check_threads(max_threads()));
  EXPECT_NO_THROW(check_threads(0));
  EXPECT_THROW(check_threads(-1), Error);
}

}  // namespace
}  // namespace qkv
