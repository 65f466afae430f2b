#include "core/ops/attention_operands.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/values.h"
#include "core/runtime/interrupt.h"

namespace qkv {
namespace {

std::atomic<int64_t> g_input_copies{0};

// The kernels hold pointers into AttentionProblem::copies; growing that
// vector must move its Tensors (their buffers stay put), never copy them.
static_assert(std::is_nothrow_move_constructible_v<Tensor>);

Tensor counted_copy(const TensorView& t) {
  g_input_copies.fetch_add(1, std::memory_order_relaxed);
  return t.contiguous();
}

// Element offsets of every (lead..., head) pair, in C order over lead + [H]:
// stride[d] is the stride of lead dim d (stride[lead.size()] the head dim's),
// 0 where a dim is broadcast.
std::vector<int64_t> head_offsets(const Shape& lead, int64_t H, const int64_t* stride) {
  const int lr = static_cast<int>(lead.size());
  int64_t B = 1;
  for (int64_t d : lead) B *= d;
  std::vector<int64_t> off(static_cast<size_t>(B * H));
  for (int64_t bh = 0; bh < B * H; ++bh) {
    int64_t rem = bh / H, o = (bh % H) * stride[lr];
    for (int d = lr - 1; d >= 0; --d) {
      o += (rem % lead[d]) * stride[d];
      rem /= lead[d];
    }
    off[bh] = o;
  }
  return off;
}

HeadRows bind_one(const TensorView& t, const AttentionProblem& p, int64_t H,
                  std::vector<Tensor>& copies) {
  TensorView src = t;
  if (!t.inner_contiguous()) {
    copies.push_back(counted_copy(t));
    src = copies.back();
  }
  HeadRows rows;
  rows.data = src.raw();
  rows.row_stride = src.stride(-2);
  rows.head_offset = head_offsets(p.lead, H, src.strides().data());
  return rows;
}

// Calls f(n, off) for every element of `t`: n its index in C order, off its
// element offset from t's data. An odometer: no division per element.
template <class F>
void for_each_element(const TensorView& t, F f) {
  Shape idx(t.shape().size(), 0);
  int64_t off = 0;
  for (int64_t n = 0; n < t.numel(); ++n) {
    f(n, off);
    for (int d = t.rank() - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= (t.shape()[d] - 1) * t.strides()[d];
      idx[d] = 0;
    }
  }
}

// What one pass over n values x[0], x[st], ... finds: whether any has an
// all-ones exponent (NaN or Inf), and the largest magnitude's bit pattern
// (sign cleared: for finite values the patterns order like the values).
// Testing bits keeps the loop free of branches, and the magnitude comes free
// with the finiteness test (no second read). Both are max reductions of
// unsigned integers (a masked exponent reaches exp_mask only when all ones),
// which GCC vectorises on the baseline x86-64 target; a bool OR of
// comparisons it left scalar, and that scan took 15-30% of a small
// problem's backward.
template <class Bits>
struct Scan {
  bool bad = false;
  Bits max_bits = 0;
  void add(const Scan& o) {
    bad |= o.bad;
    max_bits = std::max(max_bits, o.max_bits);
  }
};

template <class T, class Bits>
void scan_loop(const T* x, int64_t n, int64_t st, Bits exp_mask, Bits& me, Bits& mx) {
  const Bits magnitude = static_cast<Bits>(~(Bits{1} << (8 * sizeof(Bits) - 1)));
  for (int64_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, x + i * st, sizeof b);
    me = std::max<Bits>(me, b & exp_mask);
    mx = std::max<Bits>(mx, b & magnitude);
  }
}

template <class T, class Bits>
Scan<Bits> scan_values(const T* x, int64_t n, int64_t st, Bits exp_mask) {
  Bits me = 0, mx = 0;
  if (st == 1)  // a constant stride: the vectorised loop
    scan_loop(x, n, 1, exp_mask, me, mx);
  else
    scan_loop(x, n, st, exp_mask, me, mx);
  Scan<Bits> r;
  r.bad = me == exp_mask;
  r.max_bits = mx;
  return r;
}


// C-order index of the first NaN or Inf of `t`, or -1, and in *max_abs the
// largest magnitude (meaningful when there is no NaN or Inf). A C-ordered
// view is scanned as one array in blocks on all threads; any other as
// matrices (its last two dims), one per thread at a time. This scan runs on
// every attention call and must stay far cheaper than the attention.
template <class T, class Bits>
int64_t first_nonfinite(const TensorView& t, Bits exp_mask, double* max_abs) {
  const T* x = static_cast<const T*>(t.raw());
  const int64_t n = t.numel();
  *max_abs = 0.0;
  if (n == 0) return -1;
  const bool flat = t.is_contiguous();
  // A unit: a block of a flat view, or one matrix [L, E] (its last two dims;
  // a strided rank-1 view is one matrix of one row).
  constexpr int64_t kBlock = 1 << 14;
  const int r = t.rank();
  const int64_t L = flat || r < 2 ? 1 : t.dim(-2), E = flat ? n : t.dim(-1);
  const int64_t units = flat ? (n + kBlock - 1) / kBlock : n / (L * E);
  const int64_t rs = flat || r < 2 ? 0 : t.stride(-2), es = flat ? 1 : t.stride(-1);
  const Shape outer(t.shape().begin(), t.shape().end() - (flat ? 0 : std::min(r, 2)));
  auto unit_offset = [&](int64_t u) {  // element offset of matrix u
    int64_t o = 0;
    for (int d = static_cast<int>(outer.size()) - 1; d >= 0; --d) {
      o += (u % outer[d]) * t.strides()[d];
      u /= outer[d];
    }
    return o;
  };
  Interrupt interrupt;
  auto unit_scan = [&](int64_t u) {
    if (flat) {
      const int64_t b = u * kBlock;
      return scan_values(x + b, std::min(n, b + kBlock) - b, 1, exp_mask);
    }
    const T* m = x + unit_offset(u);
    Scan<Bits> s;
    // Rows broadcast along the matrix (row stride 0) are one row in memory:
    // it is scanned once, not L times. A tall matrix is a unit too long to
    // go without asking the interrupt.
    const int64_t rows = rs == 0 ? 1 : L;
    for (int64_t i = 0; i < rows; ++i) {
      if (i % 4096 == 4095 && interrupt.stop()) break;
      s.add(scan_values(m + i * rs, E, es, exp_mask));
    }
    return s;
  };
  int64_t first_bad = units;
  Bits max_bits = 0;
#pragma omp parallel for schedule(static) reduction(min : first_bad) reduction(max : max_bits) \
    if (n > 4 * kBlock)
  for (int64_t u = 0; u < units; ++u) {
    if (interrupt.stop()) continue;
    const Scan<Bits> s = unit_scan(u);
    if (s.bad) first_bad = std::min(first_bad, u);
    max_bits = std::max(max_bits, s.max_bits);
  }
  interrupt.throw_if_stopped();
  T m;
  std::memcpy(&m, &max_bits, sizeof m);
  *max_abs = as_double(m);
  if (first_bad == units) return -1;
  // Find the element inside the first bad unit.
  if (flat) {
    for (int64_t i = first_bad * kBlock;; ++i)
      if (!std::isfinite(as_double(x[i]))) return i;
  }
  const T* mat = x + unit_offset(first_bad);
  for (int64_t i = 0;; ++i)
    for (int64_t e = 0; e < E; ++e)
      if (!std::isfinite(as_double(mat[i * rs + e * es]))) return (first_bad * L + i) * E + e;
}

double element(const TensorView& t, int64_t off) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[off];
    case DType::f64: return t.data<double>()[off];
    case DType::boolean: return t.data<bool>()[off] ? 1.0 : 0.0;
    case DType::bf16: return bf16_to_float(t.data<bfloat16>()[off]);
  }
  return 0.0;
}

}  // namespace

int64_t input_copies() { return g_input_copies.load(std::memory_order_relaxed); }

void bind_inputs(AttentionProblem& p, const TensorView& q, const TensorView& k,
                 const TensorView& v) {
  p.q = bind_one(q, p, p.Hq, p.copies);
  p.k = bind_one(k, p, p.Hkv, p.copies);
  p.v = bind_one(v, p, p.Hkv, p.copies);
}

const void* contiguous_data(const TensorView& t, std::vector<Tensor>& keep) {
  if (t.is_contiguous()) return t.raw();
  keep.push_back(counted_copy(t));
  return keep.back().raw();
}

double check_finite(const TensorView& t, const char* what) {
  int64_t i = -1;
  double max_abs = 0.0;
  if (t.dtype() == DType::f32)
    i = first_nonfinite<float>(t, uint32_t{0x7f800000u}, &max_abs);
  else if (t.dtype() == DType::f64)
    i = first_nonfinite<double>(t, uint64_t{0x7ff0000000000000ull}, &max_abs);
  else if (t.dtype() == DType::bf16)
    i = first_nonfinite<bfloat16>(t, uint16_t{0x7f80u}, &max_abs);
  if (i < 0) return max_abs;
  int64_t off = 0, rem = i;  // the element's offset from its C-order index
  for (int d = t.rank() - 1; d >= 0; --d) {
    off += (rem % t.shape()[d]) * t.strides()[d];
    rem /= t.shape()[d];
  }
  const double x = element(t, off);
  throw Error(std::string(what) + ": values must be finite, found " +
              (std::isnan(x) ? "NaN" : (x > 0 ? "inf" : "-inf")) + " at " +
              index_str(t.shape(), i));
}

MaskView bind_mask(const TensorView& mask, const AttentionProblem& p) {
  Shape target = p.lead;
  target.insert(target.end(), {p.Hq, p.N, p.S});
  const int tr = static_cast<int>(target.size());
  const int mr = mask.rank();
  const std::string expected = "a shape broadcastable to " + shape_str(target) +
                               " (that is [..., Hq, N, S])";
  if (mr > tr)
    throw Error("mask: expected " + expected + ", found " + shape_str(mask.shape()) +
                " with more dims");
  // The mask's strides aligned to target dims from the right; 0 = broadcast
  // (a missing or size-1 dim, or a view that already has stride 0).
  std::vector<int64_t> stride(tr, 0);
  for (int i = mr - 1; i >= 0; --i) {
    const int t = i + tr - mr;
    const int64_t md = mask.shape()[i];
    if (md != target[t] && md != 1)
      throw Error("mask: expected " + expected + ", found " + shape_str(mask.shape()) +
                  " (dim " + std::to_string(md) + " against " + std::to_string(target[t]) + ")");
    stride[t] = md == 1 ? 0 : mask.strides()[i];
  }
  MaskView view;
  if (mask.dtype() != DType::boolean) {
    for_each_element(mask, [&](int64_t n, int64_t off) {
      const double x = element(mask, off);
      if (std::isfinite(x)) view.max_abs_add = std::max(view.max_abs_add, std::fabs(x));
      if (std::isnan(x) || x == INFINITY)
        throw Error("mask: additive mask values must be finite or -inf, found " +
                    std::string(std::isnan(x) ? "NaN" : "+inf") + " at " +
                    index_str(mask.shape(), n));
    });
  }
  switch (mask.dtype()) {
    case DType::boolean: view.keep = mask.data<bool>(); break;
    case DType::f32: view.add_f32 = mask.data<float>(); break;
    case DType::f64: view.add_f64 = mask.data<double>(); break;
    case DType::bf16: throw Error("mask: expected bool, float32 or float64, found bfloat16");
  }
  view.stride_n = stride[tr - 2];
  view.stride_s = stride[tr - 1];
  view.head_offset = head_offsets(p.lead, p.Hq, stride.data());
  return view;
}

}  // namespace qkv
