// modules.cpp: Head and MultiHeadAttention, built from Linear and qkv::attention.
//
// Neither re-implements attention: they only project, move heads into the
// [..., H, T, Dh] layout qkv::attention takes, and project back, so every
// masking and GQA rule is the one documented in qkv/attention.h.
#include <algorithm>
#include <cstring>
#include <string>

#include "qkv/modules.h"

namespace qkv {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

// t viewed as [B, X, Y, E] -> [B, Y, X, E], with the result given `shape`.
// Only whole E-element rows move, so one memcpy per row serves every dtype.
Tensor swap_middle(const Tensor& t, int64_t B, int64_t X, int64_t Y, int64_t E, Shape shape) {
  Tensor out(t.dtype(), std::move(shape));
  const size_t row = static_cast<size_t>(E) * dtype_size(t.dtype());
  const std::byte* src = t.raw();
  std::byte* dst = out.raw();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t x = 0; x < X; ++x)
      for (int64_t y = 0; y < Y; ++y)
        std::memcpy(dst + ((b * Y + y) * X + x) * row, src + ((b * X + x) * Y + y) * row, row);
  return out;
}

// m [..., T, H*Dh] -> [..., H, T, Dh]
Tensor split_heads(const Tensor& m, int64_t H, int64_t Dh) {
  Shape shape(m.shape().begin(), m.shape().end() - 2);
  const int64_t B = shape_numel(shape), T = m.dim(-2);
  shape.insert(shape.end(), {H, T, Dh});
  return swap_middle(m, B, T, H, Dh, std::move(shape));
}

// o [..., H, N, Dh] -> [..., N, H*Dh]
Tensor merge_heads(const Tensor& o) {
  Shape shape(o.shape().begin(), o.shape().end() - 3);
  const int64_t B = shape_numel(shape), H = o.dim(-3), N = o.dim(-2), Dh = o.dim(-1);
  shape.insert(shape.end(), {N, H * Dh});
  return swap_middle(o, B, H, N, Dh, std::move(shape));
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
