// modules.cpp: matmul, Linear, Head and MultiHeadAttention: argument checks
// around the shared layers of qkv/nn.h and qkv::attention.
//
// Nothing here re-implements a layer: projections are nn::linear_forward in
// float64 (a float32 operand widens exactly, so every output is its products
// summed in double, in order, and rounded once to the input's dtype), heads
// move with nn::split_heads / merge_heads into the [..., H, T, Dh] layout
// qkv::attention takes, and every masking and GQA rule is the one documented
// in qkv/attention.h.
#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/modules.h"
#include "qkv/nn.h"
#include "qkv/rng.h"

namespace qkv {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

void require_float(const Tensor& t, const std::string& what) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw Error(what + ": expected float32 or float64, found " + dtype_name(t.dtype()));
}

// t's values as float64: t itself, or a widened copy in `tmp` (exact).
const double* as_f64(const Tensor& t, Tensor& tmp) {
  if (t.dtype() == DType::f64) return t.data<double>();
  tmp = t.to(DType::f64);
  return tmp.data<double>();
}

// x [..., K] · w [K, P] (+ bias [P]) -> [..., P] in x's dtype; arguments already checked.
Tensor project(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Shape shape = x.shape();
  const int64_t K = w.dim(0), P = w.dim(1);
  shape.back() = P;
  const int64_t R = shape_numel(Shape(shape.begin(), shape.end() - 1));
  Tensor xt, wt, bt;
  Tensor y(DType::f64, shape);
  nn::linear_forward(y.data<double>(), as_f64(x, xt), as_f64(w, wt),
                     bias.empty() ? nullptr : as_f64(bias, bt), R, K, P,
                     nn::WeightLayout::in_out);
  return x.dtype() == DType::f64 ? y : y.to(x.dtype());
}

// m [..., T, H*Dh] -> [..., H, T, Dh]
Tensor split_heads(const Tensor& m, int64_t H, int64_t Dh) {
  Shape shape(m.shape().begin(), m.shape().end() - 2);
  const int64_t B = shape_numel(shape), T = m.dim(-2);
  shape.insert(shape.end(), {H, T, Dh});
  Tensor out(m.dtype(), std::move(shape));
  if (m.dtype() == DType::f64)
    nn::split_heads(out.data<double>(), m.data<double>(), B, T, H, Dh, H * Dh, 0);
  else
    nn::split_heads(out.data<float>(), m.data<float>(), B, T, H, Dh, H * Dh, 0);
  return out;
}

// o [..., H, N, Dh] -> [..., N, H*Dh]
Tensor merge_heads(const Tensor& o) {
  Shape shape(o.shape().begin(), o.shape().end() - 3);
  const int64_t B = shape_numel(shape), H = o.dim(-3), N = o.dim(-2), Dh = o.dim(-1);
  shape.insert(shape.end(), {N, H * Dh});
  Tensor out(o.dtype(), std::move(shape));
  if (o.dtype() == DType::f64)
    nn::merge_heads(out.data<double>(), o.data<double>(), B, N, H, Dh, H * Dh, 0);
  else
    nn::merge_heads(out.data<float>(), o.data<float>(), B, N, H, Dh, H * Dh, 0);
  return out;
}

void check_head_counts(int64_t heads, int64_t kv_heads) {
  if (heads < 1 || kv_heads < 1)
    throw Error("mha: heads and kv_heads must be at least 1, found heads = " + num(heads) +
                ", kv_heads = " + num(kv_heads));
  if (heads % kv_heads != 0)
    throw Error("mha: heads = " + num(heads) + " must be a multiple of kv_heads = " +
                num(kv_heads));
}

// A projection's weight must be 2-D with `rows` rows (any if rows < 0) and `cols` columns.
void check_weight(const Linear& lin, const char* name, int64_t rows, int64_t cols,
                  const std::string& expected) {
  const Shape& s = lin.weight.shape();
  if (s.size() != 2 || (rows >= 0 && s[0] != rows) || (cols >= 0 && s[1] != cols))
    throw Error(std::string("mha: ") + name + ": expected weight " + expected + ", found " +
                shape_str(s));
}

// A hand-built module (weights copied in by a test or a loader) must still
// agree with heads, kv_heads and head_dim, or the head split would be silently wrong.
void check_layout(const MultiHeadAttention& m) {
  check_head_counts(m.heads, m.kv_heads);
  if (m.head_dim < 1) throw Error("mha: head_dim must be at least 1, found " + num(m.head_dim));
  const int64_t q_cols = m.heads * m.head_dim, kv_cols = m.kv_heads * m.head_dim;
  check_weight(m.wq, "wq", -1, q_cols, "[C, Hq*Dh = " + num(q_cols) + "]");
  check_weight(m.wk, "wk", -1, kv_cols, "[C, Hkv*Dh = " + num(kv_cols) + "]");
  check_weight(m.wv, "wv", m.wk.weight.dim(0), kv_cols,
               std::string("[") + num(m.wk.weight.dim(0)) + " (from wk), Hkv*Dh = " + num(kv_cols) + "]");
  check_weight(m.wo, "wo", q_cols, -1, "[Hq*Dh = " + num(q_cols) + ", C]");
}

// x [..., T, C] with C = c, else a qkv::Error naming the argument.
void check_input(const Tensor& x, const std::string& name, int64_t c, const char* layout) {
  if (x.rank() < 2 || x.dim(-1) != c)
    throw Error(name + ": expected " + layout + " with C = " + num(c) + ", found shape " +
                shape_str(x.shape()));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  require_float(a, "matmul: a");
  require_float(b, "matmul: b");
  if (b.rank() != 2)
    throw Error("matmul: expected b [K, P] with 2 dims, found " + shape_str(b.shape()));
  if (a.rank() < 1)
    throw Error("matmul: expected a [..., M, K] with at least 1 dim, found " + shape_str(a.shape()));
  if (a.dim(-1) != b.dim(0))
    throw Error("matmul: expected a's last dim K = " + std::to_string(b.dim(0)) + " (b " +
                shape_str(b.shape()) + "), found " + std::to_string(a.dim(-1)) + " in shape " +
                shape_str(a.shape()));
  return project(a, b, Tensor());
}

Tensor Linear::forward(const Tensor& x) const {
  require_float(weight, "linear: weight");
  require_float(x, "linear: input");
  if (weight.rank() != 2)
    throw Error("linear: expected weight [in, out] with 2 dims, found " + shape_str(weight.shape()));
  if (x.rank() < 1 || x.dim(-1) != weight.dim(0))
    throw Error("linear: expected input last dim " + std::to_string(weight.dim(0)) + " (weight " +
                shape_str(weight.shape()) + "), found " +
                (x.rank() < 1 ? std::string("none") : std::to_string(x.dim(-1))) + " in shape " +
                shape_str(x.shape()));
  if (!bias.empty()) {
    require_float(bias, "linear: bias");
    if (bias.rank() != 1 || bias.dim(0) != weight.dim(1))
      throw Error("linear: expected bias [" + std::to_string(weight.dim(1)) + "] (weight " +
                  shape_str(weight.shape()) + "), found " + shape_str(bias.shape()));
  }
  return project(x, weight, bias);
}

Linear Linear::init(int64_t in, int64_t out, bool bias, NumpyGenerator& rng) {
  if (in < 1 || out < 1)
    throw Error("linear: in and out must be at least 1, found in = " + std::to_string(in) +
                ", out = " + std::to_string(out));
  Linear lin;
  lin.weight = Tensor(DType::f64, {in, out});
  double* w = lin.weight.data<double>();
  // Divide (not multiply by 1/sqrt(in)) so every value rounds as NumPy's does.
  const double root = std::sqrt(static_cast<double>(in));
  for (int64_t i = 0; i < in * out; ++i) w[i] = rng.standard_normal() / root;
  if (bias) lin.bias = Tensor(DType::f64, {out});
  return lin;
}

Tensor Head::forward(const Tensor& x, Tensor* weights) const {
  if (query.weight.rank() == 2) check_input(x, "head: x", query.weight.dim(0), "[..., T, C]");
  // qkv::attention wants a head axis: [..., T, Dh] -> [..., 1, T, Dh].
  auto one_head = [](const Tensor& t) {
    Shape s = t.shape();
    s.insert(s.end() - 2, 1);
    return t.reshaped(std::move(s));
  };
  AttentionOptions opts;  // scale defaults to 1/sqrt(Dh)
  opts.causal = causal ? Causal::top_left : Causal::none;
  opts.return_weights = weights != nullptr;
  AttentionResult r = attention(one_head(query.forward(x)), one_head(key.forward(x)),
                                one_head(value.forward(x)), opts);
  Shape lead(x.shape().begin(), x.shape().end() - 1);  // [..., T]
  if (weights) {
    Shape ws = lead;
    ws.push_back(x.dim(-2));
    *weights = r.weights.reshaped(std::move(ws));  // [..., T, T]
  }
  lead.push_back(r.out.dim(-1));
  return r.out.reshaped(std::move(lead));  // [..., T, Dh]
}

Head Head::init(int64_t C, int64_t Dh, NumpyGenerator& rng, bool causal) {
  if (C < 1 || Dh < 1)
    throw Error("head: C and Dh must be at least 1, found C = " + num(C) + ", Dh = " + num(Dh));
  Head h;
  h.query = Linear::init(C, Dh, false, rng);
  h.key = Linear::init(C, Dh, false, rng);
  h.value = Linear::init(C, Dh, false, rng);
  h.causal = causal;
  return h;
}

Tensor MultiHeadAttention::forward(const Tensor& x_q, const Tensor& x_kv,
                                   const AttentionOptions& opts, Tensor* weights) const {
  check_layout(*this);
  check_input(x_q, "mha: x_q", wq.weight.dim(0), "[..., N, C]");
  check_input(x_kv, "mha: x_kv", wk.weight.dim(0), "[..., S, C]");
  if (!std::equal(x_q.shape().begin(), x_q.shape().end() - 2, x_kv.shape().begin(),
                  x_kv.shape().end() - 2))
    throw Error("mha: x_q, x_kv: expected the same leading dims, found x_q " +
                shape_str(x_q.shape()) + " and x_kv " + shape_str(x_kv.shape()));
  const Tensor q = split_heads(wq.forward(x_q), heads, head_dim);      // [..., Hq, N, Dh]
  const Tensor k = split_heads(wk.forward(x_kv), kv_heads, head_dim);  // [..., Hkv, S, Dh]
  const Tensor v = split_heads(wv.forward(x_kv), kv_heads, head_dim);  // [..., Hkv, S, Dh]
  AttentionOptions o = opts;
  o.return_weights = weights != nullptr;
  o.return_lse = false;
  AttentionResult r = attention(q, k, v, o);  // out [..., Hq, N, Dh]
  if (weights) *weights = std::move(r.weights);
  return wo.forward(merge_heads(r.out));  // [..., N, Hq*Dh] -> [..., N, C]
}

MultiHeadAttention MultiHeadAttention::init(int64_t C, int64_t heads, int64_t kv_heads,
                                            NumpyGenerator& rng, bool bias) {
  check_head_counts(heads, kv_heads);
  if (C < 1 || C % heads != 0)
    throw Error("mha: model width C = " + num(C) + " must be a positive multiple of heads = " +
                num(heads));
  MultiHeadAttention m;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = C / heads;
  m.wq = Linear::init(C, heads * m.head_dim, bias, rng);
  m.wk = Linear::init(C, kv_heads * m.head_dim, bias, rng);
  m.wv = Linear::init(C, kv_heads * m.head_dim, bias, rng);
  m.wo = Linear::init(heads * m.head_dim, C, bias, rng);
  return m;
}

}  // namespace qkv
