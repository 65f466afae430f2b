// softmax_ref.h: the one softmax every reference op uses.
#pragma once

#include <cstdint>

namespace qkv::ref {

// p[j] = exp(s[j] - m) / sum_j exp(s[j] - m), with m = max_j s[j].
// Subtracting m keeps every exp in (0, 1], so huge scores cannot overflow.
// Blocked entries are -inf and get exactly 0. Returns the row's log-sum-exp,
// m + log(sum); a row with no finite entry returns -inf and leaves p all 0
// (not 0/0 = NaN). s may alias p. Callers guarantee no +inf or NaN in s.
double softmax_row(const double* s, double* p, int64_t n);

}  // namespace qkv::ref
