// test_scale.h: how many random cases the heavy tests run. QKV_TEST_SCALE
// (default 1) multiplies each count; the sanitizer runs (scripts/test.sh) set
// 0.1, since ASan and TSan make every case 5-20x slower. Each test passes a
// floor that keeps every case kind it cycles through, so a trimmed run still
// covers them all, only on fewer random draws.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace qkv_test {

// QKV_TEST_SCALE as a number in (0, 1000]; unset, empty or malformed is 1.
inline double test_scale() {
  const char* s = std::getenv("QKV_TEST_SCALE");
  if (s == nullptr || *s == '\0') return 1.0;
  char* end = nullptr;
  const double x = std::strtod(s, &end);
  return *end == '\0' && x > 0.0 && x <= 1000.0 ? x : 1.0;
}

// n cases scaled by QKV_TEST_SCALE, never fewer than floor (nor than 1).
inline uint64_t scaled_count(uint64_t n, uint64_t floor) {
  const auto scaled = static_cast<uint64_t>(std::llround(static_cast<double>(n) * test_scale()));
  return std::max<uint64_t>({scaled, floor, 1});
}

}  // namespace qkv_test
