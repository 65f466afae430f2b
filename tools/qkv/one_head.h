// one_head.h: the lessons' arrays are 2-D, (N, D) for a single head, while
// qkv's attention takes [..., H, N, D]. The commands accept both: 2-D q, k
// and v become one head [1, N, D], and the results lose that axis again, so a
// 2-D question gets a 2-D answer, as it would from the lessons' NumPy code.
#pragma once

#include "qkv/error.h"
#include "qkv/tensor.h"

namespace qkv::cli {

// True when q, k and v are all 2-D; they are then reshaped to [1, N, D].
// False, and nothing changes, when none is. A mix is an error naming the
// shapes: which one was meant cannot be guessed.
inline bool lift_one_head(Tensor& q, Tensor& k, Tensor& v) {
  const int two_d = (q.rank() == 2) + (k.rank() == 2) + (v.rank() == 2);
  if (two_d == 0) return false;
  if (two_d != 3)
    throw Error("q, k, v: expected all three 2-D (N, D) for one head, or all [..., H, N, D], "
                "found q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " +
                shape_str(v.shape()));
  for (Tensor* t : {&q, &k, &v}) *t = t->reshaped({1, t->dim(0), t->dim(1)});
  return true;
}

// Undoes lift_one_head on a result: [1, N, X] -> [N, X], [1, N] -> [N].
inline Tensor drop_head(const Tensor& t) {
  return t.reshaped(Shape(t.shape().begin() + 1, t.shape().end()));
}

}  // namespace qkv::cli
