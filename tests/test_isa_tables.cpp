// The SIMD paths as the library lists them (all_isas, available_isas) and
// the table of kernels each path carries (core/isa_kernels.h): what every
// test parameterised by Isa, and every caller of the kernels, relies on.
#include <algorithm>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "core/isa_kernels.h"
#include "isa_fixture.h"
#include "qkv/error.h"
#include "qkv/runtime.h"

using namespace qkv;

namespace {

// Every path in the enum's order, each found again by its name.
TEST(IsaLists, AllIsasAreEveryPathInOrder) {
  const auto all = all_isas();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all.front(), Isa::scalar);
  EXPECT_EQ(all.back(), Isa::amx);
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(isa_name(all[i]));
    if (i > 0) {
      EXPECT_LT(static_cast<int>(all[i - 1]), static_cast<int>(all[i]));
    }
    EXPECT_EQ(parse_isa(isa_name(all[i])), all[i]);
  }
  EXPECT_EQ(parse_isa("avx-512"), std::nullopt);
}

// A path runs on any CPU that runs a later one, so the available paths are
// a leading part of all_isas(), scalar first and detected_isa() last; set_isa
// accepts each of them and refuses the rest by name.
TEST(IsaLists, AvailableIsasArePrefixEndingAtTheDetectedPath) {
  const auto all = all_isas();
  const auto here = available_isas();
  ASSERT_FALSE(here.empty());
  ASSERT_LE(here.size(), all.size());
  EXPECT_TRUE(std::equal(here.begin(), here.end(), all.begin()));
  EXPECT_EQ(here.back(), detected_isa());
  const Isa previous = active_isa();
  for (Isa isa : all) {
    SCOPED_TRACE(isa_name(isa));
    if (test::runs_here(isa)) {
      set_isa(isa);
      EXPECT_EQ(active_isa(), isa);
    } else {
      try {
        set_isa(isa);
        ADD_FAILURE() << "set_isa accepted a path this CPU lacks";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(isa_name(isa)), std::string::npos) << e.what();
      }
    }
  }
  set_isa(previous);
}

// Each path's table names itself and carries the kernels of its instruction
// set: float32 attention everywhere, vdpbf16ps pairs (attention and GEMM)
// from avx512bf16 up, AMX tiles on amx only. Callers branch on these
// pointers, so a wrong one would silently run (or skip) a path's kernels.
// Only the tables are read here: nothing runs, so every path is checked.
TEST(IsaTables, EachPathCarriesTheKernelsOfItsInstructionSet) {
  for (Isa isa : all_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const kernels::IsaKernels& k = kernels::isa_kernels(isa);
    EXPECT_EQ(k.isa, isa);
    EXPECT_NE(k.flash, nullptr);
    EXPECT_NE(k.fma, nullptr);
    const bool pairs = isa == Isa::avx512bf16 || isa == Isa::amx;
    EXPECT_EQ(k.flash_bf16 != nullptr, pairs);
    EXPECT_EQ(k.gemm_pairs != nullptr, pairs);
    EXPECT_EQ(k.flash_amx != nullptr, isa == Isa::amx);
    EXPECT_EQ(k.gemm_amx != nullptr, isa == Isa::amx);
  }
}

}  // namespace
