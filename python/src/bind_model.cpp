// _qkv.Model, _qkv.train and _qkv.heatmap_png: the model layer and the
// pictures, for qkv/__init__.py's GPT, train() and lesson notebooks.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "qkv/quantize.h"
#include "interruptible.h"
#include "qkv/heatmap.h"
#include "qkv/model.h"
#include "qkv/trainer.h"

namespace qkvpy {

namespace {

std::atomic<int> g_stop_training{0};  // set by request_stop(), read by the trainer's loop

// dtype=... of train, embed and generate: "float32", or "bf16" / "bfloat16"
// for the Linear layers' products in bf16; generate's kv_dtype the same for
// the KV cache (`what` names the argument in the message).
qkv::DType compute_dtype(const std::string& s, const char* what = "dtype") {
  if (s == "float32") return qkv::DType::f32;
  if (s == "bf16" || s == "bfloat16") return qkv::DType::bf16;
  throw nb::value_error(
      (std::string(what) + ": expected 'float32', 'bf16' or 'bfloat16', found '" + s + "'").c_str());
}

// TrainOptions from keyword arguments; an unknown name is a TypeError, as a
// Python function's would be.
qkv::TrainOptions train_options(const std::string& text_path, const std::string& out_dir,
                                const nb::dict& kw) {
  qkv::TrainOptions o;
  o.text_path = text_path;
  o.out_dir = out_dir;
  for (auto [key, value] : kw) {
    const std::string k = nb::cast<std::string>(key);
    auto i64 = [&] { return nb::cast<int64_t>(value); };
    auto f64 = [&] { return nb::cast<double>(value); };
    if (k == "context") o.model.context = i64();
    else if (k == "layers") o.model.layers = i64();
    else if (k == "heads") o.model.heads = i64();
    else if (k == "kv_heads") o.model.kv_heads = i64();
    else if (k == "embd") o.model.embd = i64();
    else if (k == "rope") o.model.rope = nb::cast<bool>(value);
    else if (k == "bias") o.model.bias = nb::cast<bool>(value);
    else if (k == "batch") o.batch = i64();
    else if (k == "iters") o.iters = i64();
    else if (k == "warmup") o.warmup = i64();
    else if (k == "eval_interval") o.eval_interval = i64();
    else if (k == "eval_iters") o.eval_iters = i64();
    else if (k == "log_interval") o.log_interval = i64();
    else if (k == "lr") o.lr = f64();
    else if (k == "min_lr") o.min_lr = f64();
    else if (k == "beta1") o.adam.beta1 = f64();
    else if (k == "beta2") o.adam.beta2 = f64();
    else if (k == "weight_decay") o.adam.weight_decay = f64();
    else if (k == "grad_clip") o.adam.grad_clip = f64();
    else if (k == "seed") o.seed = nb::cast<uint64_t>(value);
    else if (k == "threads") o.threads = nb::cast<int>(value);
    else if (k == "kernel") o.kernel = qkv::parse_kernel(nb::cast<std::string>(value));
    else if (k == "dtype") o.dtype = compute_dtype(nb::cast<std::string>(value));
    else if (k == "resume") o.resume = nb::cast<bool>(value);
    else if (k == "force") o.force = nb::cast<bool>(value);
    else if (k == "stop_at") o.stop_at = i64();
    else throw nb::type_error(("train() got an unexpected keyword argument '" + k + "'").c_str());
  }
  return o;
}

}  // namespace

void bind_model(nb::module_& m) {
  m.def(
      "quantize",
      [](const std::string& model, const std::string& out, const std::string& type) {
        qkv::QuantizeOptions o;
        o.mix = qkv::quant_mix_from_name(type);
        std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>> tensors;
        for (const qkv::QuantizedTensor& t : qkv::quantize_model(model, out, o))
          tensors.emplace_back(t.name, t.ne, qkv::weight_type_info(t.type).name);
        return tensors;
      },
      nb::arg("model"), nb::arg("out"), nb::arg("type"), nb::call_guard<nb::gil_scoped_release>());
  nb::class_<qkv::Model>(m, "Model")
      .def_static(
          "load",
          [](const std::string& dir, bool dequantize, const std::string& quantize) {
            qkv::LoadOptions o;
            o.dequantize = dequantize;
            if (quantize == "q8_0") o.quantize = qkv::WeightType::q8_0;
            else if (quantize == "q4_0") o.quantize = qkv::WeightType::q4_0;
            else if (!quantize.empty())
              throw qkv::Error("quantize: expected \"q8_0\" or \"q4_0\", found \"" + quantize + "\"");
            return qkv::Model::load(dir, o);
          },
          nb::arg("dir"), nb::arg("dequantize") = false, nb::arg("quantize") = "",
          nb::call_guard<nb::gil_scoped_release>())
      .def("config",
           [](const qkv::Model& self) {
             const qkv::GPTConfig& c = self.config();
             nb::dict d;
             d["vocab"] = c.vocab, d["context"] = c.context, d["layers"] = c.layers;
             d["heads"] = c.heads, d["kv_heads"] = c.kv_heads, d["embd"] = c.embd, d["head_dim"] = c.head_dim();
             d["rope"] = c.rope, d["bias"] = c.bias;
             d["ffn"] = c.ffn_dim(), d["post_norm"] = c.post_norm, d["causal"] = c.causal;
             d["architecture"] = self.architecture();
             return d;
           })
      .def("is_encoder", &qkv::Model::is_encoder)
      .def("load_warnings", &qkv::Model::load_warnings)
      .def("weights_dtype", [](const qkv::Model& self) {
        return std::string(self.weights_dtype() == qkv::DType::bf16 ? "bf16" : "float32");
      })
      .def("max_length", &qkv::Model::max_length)
      .def("encode", [](const qkv::Model& self, const std::string& s) { return self.tokenize(s); })
      .def("token_text", [](const qkv::Model& self, int32_t id) {
        const std::string t = self.token_text(id);
        return nb::bytes(t.data(), t.size());
      })
      .def("token_label", &qkv::Model::token_label)  // always valid UTF-8
      .def("hidden_states",
           [](qkv::Model& self, const std::vector<int32_t>& tokens) {
             qkv::Tensor t = interruptible([&] { return self.hidden_states(tokens); });
             return wrap(std::move(t), Framework::numpy);
           })
      .def("embed",
           [](qkv::Model& self, const std::vector<std::string>& texts, int64_t batch,
              int64_t max_length, const std::string& dtype) {
             qkv::EmbedOptions o;
             o.batch = batch, o.max_length = max_length;
             o.dtype = compute_dtype(dtype);
             int64_t cut = 0;
             qkv::Tensor t = interruptible([&] { return self.embed(texts, o, &cut); });
             return nb::make_tuple(wrap(std::move(t), Framework::numpy), cut);
           })
      .def("decode", [](const qkv::Model& self, const std::vector<int32_t>& ids, bool skip_special) {
        return self.decode(ids, skip_special);
      })
      .def("set_threads", [](qkv::Model& self, int threads, const std::string& kernel) {
        self.set_threads(threads, qkv::parse_kernel(kernel));
      })
      .def("logits",
           [](qkv::Model& self, const std::vector<int32_t>& tokens) {
             qkv::Tensor t = interruptible([&] { return self.logits(tokens); });
             return wrap(std::move(t), Framework::numpy);
           })
      .def("attention_maps",
           [](qkv::Model& self, const std::vector<int32_t>& tokens) {
             qkv::Tensor t = interruptible([&] { return self.attention_maps(tokens); });
             return wrap(std::move(t), Framework::numpy);
           })
      // on_token is called with the GIL held, once per generated piece of text.
      .def("generate",
           [](qkv::Model& self, const std::string& prompt, int64_t tokens, double temperature,
              int64_t top_k, uint64_t seed, bool use_cache, const std::optional<std::string>& dtype,
              const std::optional<std::string>& kv_dtype, bool sliding_window, bool special_tokens,
              nb::object on_token) {
             qkv::SampleOptions o;
             o.prompt = prompt, o.tokens = tokens, o.temperature = temperature;
             o.top_k = top_k, o.seed = seed, o.use_cache = use_cache;
             o.sliding_window = sliding_window, o.special_tokens = special_tokens;
             if (dtype) o.dtype = compute_dtype(*dtype);  // None: the weights' dtype
             if (kv_dtype) o.kv_dtype = compute_dtype(*kv_dtype, "kv_dtype");  // None: GPT::default_kv_dtype
             std::function<void(const std::string&)> cb;
             if (!on_token.is_none())
               cb = [&on_token](const std::string& piece) {
                 nb::gil_scoped_acquire locked;
                 on_token(nb::bytes(piece.data(), piece.size()));
               };
             const qkv::Generation g = interruptible([&] { return self.generate(o, cb); });
             nb::dict d;
             d["ids"] = nb::cast(g.ids);
             d["text"] = nb::bytes(g.text.data(), g.text.size());
             d["stop"] = qkv::stop_reason_name(g.stop);
             return d;
           },
           nb::arg("prompt"), nb::arg("tokens"), nb::arg("temperature"), nb::arg("top_k"),
           nb::arg("seed"), nb::arg("use_cache"), nb::arg("dtype").none(), nb::arg("kv_dtype").none(),
           nb::arg("sliding_window"), nb::arg("special_tokens"), nb::arg("on_token").none());

  m.def(
      "train",
      [](const std::string& text_path, const std::string& out_dir, const nb::dict& kw) {
        qkv::TrainOptions o = train_options(text_path, out_dir, kw);
        // Not cleared here: a Ctrl-C that came before this worker got here
        // still counts (the caller clears it before starting the worker).
        o.stop_requested = &g_stop_training;
        qkv::TrainResult r;
        {
          nb::gil_scoped_release unlocked;
          r = qkv::train(o);
        }
        nb::dict d;
        d["iters_run"] = r.iters_run, d["final_train_loss"] = r.final_train_loss;
        d["final_val_loss"] = r.final_val_loss, d["interrupted"] = r.interrupted;
        d["next_iter"] = r.next_iter;
        return d;
      },
      nb::arg("text_path"), nb::arg("out_dir"), nb::arg("options"));
  m.def(
      "request_stop", [](bool stop) { g_stop_training = stop ? 1 : 0; }, nb::arg("stop") = true,
      "Asks a running (or starting) train() to checkpoint and return after its current step; "
      "False clears the request before a new run.");

  // Panels of [rows, cols] float64 weights, written as one PNG at `path`.
  m.def(
      "heatmap_png",
      [](const std::string& path, const std::vector<std::string>& titles,
         const std::vector<nb::ndarray<double, nb::ndim<2>, nb::c_contig, nb::device::cpu>>& ws,
         const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
         int per_row) {
        std::vector<qkv::HeatmapPanel> panels;
        for (size_t i = 0; i < ws.size(); ++i)
          panels.push_back({i < titles.size() ? titles[i] : "", ws[i].data(),
                            static_cast<int64_t>(ws[i].shape(0)),
                            static_cast<int64_t>(ws[i].shape(1)), row_labels, col_labels});
        qkv::write_heatmap_png(path, panels, per_row);
      },
      nb::arg("path"), nb::arg("titles"), nb::arg("weights"), nb::arg("row_labels"),
      nb::arg("col_labels"), nb::arg("per_row"));
}

}  // namespace qkvpy
