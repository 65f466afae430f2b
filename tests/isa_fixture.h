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

// True if this CPU (and OS) runs `isa`: it is among available_isas().
inline bool runs_here(Isa isa) {
  for (Isa a : available_isas())
    if (a == isa) return true;
  return false;
}

// Why `isa` is skipped here, naming it ("this CPU cannot run the amx path").
inline std::string absent_isa(Isa isa) {
  return std::string("this CPU cannot run the ") + isa_name(isa) + " path (best: " +
         isa_name(detected_isa()) + ")";
}

// Instantiate a suite on every path the build carries (all_isas()):
//   INSTANTIATE_TEST_SUITE_P(Isas, Suite, ::testing::ValuesIn(all_isas()), isa_test_name);
class OnIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!runs_here(GetParam())) GTEST_SKIP() << absent_isa(GetParam());
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
