// isa_fixture.h: runs each test of a suite parameterised by Isa on that SIMD
// path, restoring the previous one afterwards. A path this CPU lacks is
// skipped by name, never passed silently.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include <gtest/gtest.h>

#include "qkv/runtime.h"

namespace qkv {

// gtest prints a parameter as its ISA's name (ADL finds it in namespace qkv).
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

}  // namespace qkv

namespace qkv::test {

// Names a test instance by its ISA ("Isas/Suite.Test/avx512").
inline std::string isa_test_name(const ::testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

class OnIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(detected_isa())) {
      if (GetParam() == Isa::avx512bf16) GTEST_SKIP() << "AVX512-BF16 not on this CPU";
      if (GetParam() == Isa::amx) GTEST_SKIP() << "AMX-BF16 not on this CPU (or not granted by the OS)";
      GTEST_SKIP() << "this CPU cannot run the " << isa_name(GetParam()) << " path (best: "
                   << isa_name(detected_isa()) << ")";
    }
    previous_ = active_isa();
    set_isa(GetParam());
  }
  void TearDown() override {
    if (previous_) set_isa(*previous_);
  }

 private:
  std::optional<Isa> previous_;
};

}  // namespace qkv::test
