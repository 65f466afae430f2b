// The kernels size all their scratch before a parallel region, so running
// out of memory is a qkv::Error at the call (catchable, with the size named)
// and never an exception escaping an OpenMP region, which would terminate
// the process. Each case runs in a fresh child process (a death test in the
// "threadsafe" style re-executes this binary) whose address space is capped
// just above what the inputs need.
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "qkv/attention.h"

namespace {

// Caps the address space at the current size plus `extra` bytes.
void cap_address_space(size_t extra) {
  size_t pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%zu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const rlim_t limit = pages * 4096 + extra;
  const rlimit r{limit, limit};
  setrlimit(RLIMIT_AS, &r);
}

// Exits 0 if `call` throws qkv::Error mentioning "out of memory", 1 if it
// returns, 2 for any other exception.
template <class Call>
void expect_clean_error(Call call) {
  try {
    call();
  } catch (const qkv::Error& e) {
    std::exit(std::strstr(e.what(), "out of memory") ? 0 : 2);
  } catch (...) {
    std::exit(2);
  }
  std::exit(1);
}

bool under_a_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  return false;
}

class ScratchOom : public ::testing::Test {
 protected:
  void SetUp() override {
    // The sanitizers reserve terabytes of address space for their shadow
    // memory, so an address-space cap cannot model "memory is short" there.
    if (under_a_sanitizer()) GTEST_SKIP() << "address-space limits do not apply under ASan/TSan";
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

// One query row of a huge head dim: the inputs are 3 MiB, the workspace of
// a thread ~0.5 GiB (a packed panel of kBR queries x D and an O tile).
constexpr int64_t kHugeD = 1 << 18;

qkv::Tensor row() { return qkv::Tensor(qkv::DType::f32, {1, 1, kHugeD}); }

qkv::AttentionOptions fast_on_two_threads() {
  qkv::AttentionOptions o;
  o.kernel = qkv::Kernel::fast;
  o.threads = 2;
  return o;
}

void forward_with_little_memory() {
  const qkv::Tensor q = row(), k = row(), v = row();
  cap_address_space(size_t{256} << 20);
  expect_clean_error([&] { qkv::attention(q, k, v, fast_on_two_threads()); });
}

void backward_with_little_memory() {
  const qkv::Tensor q = row(), k = row(), v = row(), out = row(), dout = row();
  const qkv::Tensor lse(qkv::DType::f32, {1, 1});
  qkv::AttentionGrads g{row(), row(), row()};
  cap_address_space(size_t{256} << 20);
  expect_clean_error(
      [&] { qkv::attention_backward_into(g, q, k, v, out, lse, dout, fast_on_two_threads()); });
}

TEST_F(ScratchOom, ForwardReportsOutOfMemory) {
  EXPECT_EXIT(forward_with_little_memory(), ::testing::ExitedWithCode(0), "");
}

TEST_F(ScratchOom, BackwardReportsOutOfMemory) {
  EXPECT_EXIT(backward_with_little_memory(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
