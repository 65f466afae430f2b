// _qkv.attention / _qkv.attention_backward: the op on caller's arrays.
//
// q, k, v (and out, lse, dout for the backward) are read where they lie:
// view_of() passes the caller's pointer and strides, and the op itself reads
// any input whose last dim is contiguous in place (qkv/attention.h). The
// pointers handed to the op are recorded for the tests (testing.h).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "interruptible.h"
#include "qkv/attention.h"
#include "testing.h"

namespace qkvpy {

namespace {

// What the Python side passes for AttentionOptions, already normalised
// (qkv/__init__.py checks the Python types and spells the defaults).
struct OptionArgs {
  std::optional<Array> mask;
  std::string causal;
  bool is_causal;
  std::optional<double> scale;
  std::optional<std::pair<int64_t, int64_t>> window;
  std::vector<int64_t> key_lengths;
  std::vector<double> alibi_slopes;
  double softcap;
  std::string kernel;
  int threads;
};

qkv::AttentionOptions options(const OptionArgs& a, qkv::TensorView& mask_view) {
  qkv::AttentionOptions o;
  // The library reads the names (a qkv::Error, a ValueError here, for an
  // unknown one). PyTorch's is_causal picks the mask; causal only its
  // flavour, so a flavour without is_causal (bottom-right ignored: a
  // non-causal result) or "none" with it is refused rather than silently
  // dropped.
  const qkv::Causal causal = qkv::parse_causal(a.causal);
  if (a.is_causal && causal == qkv::Causal::none)
    throw nb::value_error("causal: expected 'top-left' or 'bottom-right' with is_causal=True, found 'none'");
  if (!a.is_causal && causal == qkv::Causal::bottom_right)
    throw nb::value_error("causal: 'bottom-right' needs is_causal=True (without it no causal "
                          "mask applies)");
  o.causal = a.is_causal ? causal : qkv::Causal::none;
  o.kernel = qkv::parse_kernel(a.kernel);
  o.scale = a.scale;
  if (a.window) o.window = qkv::SlidingWindow{a.window->first, a.window->second};
  o.key_lengths = a.key_lengths;
  o.alibi_slopes = a.alibi_slopes;
  o.softcap = a.softcap;
  o.threads = a.threads;
  if (a.mask) mask_view = view_of(*a.mask, "attn_mask");
  o.mask = mask_view;
  return o;
}

// q, k and v must share one float dtype: a mismatch is a TypeError, as in
// PyTorch, not the library's generic qkv::Error.
void same_dtype(const qkv::TensorView& q, const qkv::TensorView& x, const char* what) {
  if (x.dtype() != q.dtype())
    throw nb::type_error((std::string(what) + ": dtype " + qkv::dtype_name(x.dtype()) +
                          " differs from query's " + qkv::dtype_name(q.dtype()))
                             .c_str());
  if (q.dtype() == qkv::DType::boolean)
    throw nb::type_error("query: dtype bool is not supported (expected float32 or float64)");
}

// The library names arguments as its C++ API does (q, k, v, mask, dout);
// the Python functions call them query, key, value, attn_mask, grad_out.
std::string python_names(std::string message) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"q", "query"}, {"k", "key"}, {"v", "value"}, {"mask", "attn_mask"}, {"dout", "grad_out"}};
  for (const auto& [cpp, py] : kNames) {
    const std::string lead = std::string(cpp) + ":", from = std::string("(from ") + cpp + ")";
    if (message.rfind(lead, 0) == 0) message = py + message.substr(std::strlen(cpp));
    for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at))
      message.replace(at, from.size(), std::string("(from ") + py + ")");
  }
  return message;
}

// work() as interruptible() runs it, its errors in the Python names.
template <class Work>
void run_named(Work&& work) {
  try {
    interruptible(std::forward<Work>(work));
  } catch (const qkv::Interrupted&) {
    throw;
  } catch (const qkv::Error& e) {
    throw qkv::Error(python_names(e.what()));
  }
}

nb::object maybe(qkv::Tensor& t, bool want, Framework fw) {
  return want ? wrap(std::move(t), fw) : nb::none();
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def(
      "attention",
      [](const Array& qa, const Array& ka, const Array& va, std::optional<Array> mask,
         std::string causal, bool is_causal, std::optional<double> scale,
         std::optional<std::pair<int64_t, int64_t>> window, std::vector<int64_t> key_lengths,
         std::vector<double> alibi_slopes, double softcap, bool return_weights, bool return_lse,
         std::string kernel, int threads, bool torch_out) {
        const qkv::TensorView q = view_of(qa, "query"), k = view_of(ka, "key"),
                              v = view_of(va, "value");
        same_dtype(q, q, "query");
        same_dtype(q, k, "key");
        same_dtype(q, v, "value");
        qkv::TensorView mask_view;
        qkv::AttentionOptions o =
            options({std::move(mask), causal, is_causal, scale, window, key_lengths,
                     alibi_slopes, softcap, kernel, threads},
                    mask_view);
        o.return_weights = return_weights;
        o.return_lse = return_lse;
        record_inputs(q, k, v);
        // Outputs from the pool when a dropped result fits ([..., Hq, N] from q,
        // Dv from v, S from k); a wrong guess (bad shapes) just allocates.
        qkv::AttentionResult r;
        if (q.rank() >= 1 && k.rank() >= 2 && v.rank() >= 1) {
          qkv::Shape rows(q.shape().begin(), q.shape().end() - 1);
          qkv::Shape out_shape = rows, weights_shape = rows;
          out_shape.push_back(v.dim(-1));
          weights_shape.push_back(k.dim(-2));
          r.out = reuse(q.dtype(), out_shape);
          if (return_weights) r.weights = reuse(q.dtype(), weights_shape);
          if (return_lse) r.lse = reuse(q.dtype(), rows);
        }
        run_named([&] { qkv::attention_into(r, q, k, v, o); });
        const Framework fw = torch_out ? Framework::torch : Framework::numpy;
        return nb::make_tuple(wrap(std::move(r.out), fw), maybe(r.weights, return_weights, fw),
                              maybe(r.lse, return_lse, fw));
      },
      nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("attn_mask").none(),
      nb::arg("causal"), nb::arg("is_causal"), nb::arg("scale").none(), nb::arg("window").none(),
      nb::arg("key_lengths"), nb::arg("alibi_slopes"), nb::arg("softcap"),
      nb::arg("return_weights"), nb::arg("return_lse"), nb::arg("kernel"), nb::arg("threads"),
      nb::arg("torch_out"),
      "qkv::attention on the caller's arrays: (out, weights or None, lse or None).");

  m.def(
      "attention_backward",
      [](const Array& qa, const Array& ka, const Array& va, const Array& outa, const Array& lsea,
         const Array& douta, std::optional<Array> mask, std::string causal,
         bool is_causal, std::optional<double> scale,
         std::optional<std::pair<int64_t, int64_t>> window,
         std::vector<int64_t> key_lengths, std::vector<double> alibi_slopes, double softcap,
         std::string kernel, int threads, bool torch_out) {
        const qkv::TensorView q = view_of(qa, "query"), k = view_of(ka, "key"),
                              v = view_of(va, "value"), out = view_of(outa, "out"),
                              lse = view_of(lsea, "lse"), dout = view_of(douta, "grad_out");
        same_dtype(q, q, "query");
        same_dtype(q, k, "key");
        same_dtype(q, v, "value");
        // bfloat16 inputs: lse is float32 (as the forward returns it), and out
        // and grad_out may be either (the library checks them).
        if (q.dtype() != qkv::DType::bf16) {
          same_dtype(q, out, "out");
          same_dtype(q, lse, "lse");
          same_dtype(q, dout, "grad_out");
        }
        qkv::TensorView mask_view;
        const qkv::AttentionOptions o =
            options({std::move(mask), causal, is_causal, scale, window, key_lengths,
                     alibi_slopes, softcap, kernel, threads},
                    mask_view);
        qkv::AttentionGrads g;
        run_named([&] { qkv::attention_backward_into(g, q, k, v, out, lse, dout, o); });
        const Framework fw = torch_out ? Framework::torch : Framework::numpy;
        return nb::make_tuple(wrap(std::move(g.dq), fw), wrap(std::move(g.dk), fw),
                              wrap(std::move(g.dv), fw));
      },
      nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("out"), nb::arg("lse"),
      nb::arg("grad_out"), nb::arg("attn_mask").none(), nb::arg("causal"),
      nb::arg("is_causal"), nb::arg("scale").none(), nb::arg("window").none(), nb::arg("key_lengths"),
      nb::arg("alibi_slopes"), nb::arg("softcap"), nb::arg("kernel"), nb::arg("threads"),
      nb::arg("torch_out"), "qkv::attention_backward_into: (dq, dk, dv).");
}

}  // namespace qkvpy
