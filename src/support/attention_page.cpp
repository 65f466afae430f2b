// attention_page.cpp: the HTML attention viewer (support/attention_page.h).
#include "support/attention_page.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "io/files.h"

namespace qkv {
namespace {

// The page around the data. Tokens reach the DOM through textContent only,
// so no token can inject markup; the JSON sits in a non-executed script
// element with every '<', '>' and '&' written as a \u escape (the same string
// to JSON.parse). Escaping only "</" was not enough: "<!--<script>" in a
// title opens a script-data escape state in the HTML parser, and the page
// rendered nothing.
constexpr const char* kHead = R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>qkv attention</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.2em; margin: 0 0 .3em; }
.hint { color: #666; margin: 0 0 1em; }
#prompt { display: flex; flex-wrap: wrap; gap: 2px; margin-bottom: 1.2em; }
.tok { font-family: ui-monospace, monospace; padding: 2px 4px; border: 1px solid #ccc;
       border-radius: 3px; cursor: pointer; white-space: pre; }
.tok.sel { border-color: #d33; outline: 2px solid #d33; }
#grid { display: grid; gap: 14px; }
.panel { border: 1px solid #ddd; border-radius: 4px; padding: 6px; }
.panel h2 { font-size: .95em; margin: 0 0 4px; }
.keys { display: flex; flex-wrap: wrap; gap: 1px; margin-bottom: 6px; }
.key { font-family: ui-monospace, monospace; font-size: 12px; padding: 1px 2px;
       white-space: pre; display: inline-flex; flex-direction: column; align-items: center; }
.w { font-size: 10px; }
.map { position: relative; width: 100%; max-width: 320px; }
canvas { image-rendering: pixelated; width: 100%; display: block; }
.row { position: absolute; left: 0; right: 0; outline: 1px solid #d33; pointer-events: none; }
</style></head><body>
<h1 id="title"></h1>
<p class="hint">Hover a token (or tab to it) to see what it attends to in every layer and head.
Darker = more weight. Each panel's heatmap below has one row per query token.</p>
<div id="prompt"></div>
<div id="grid"></div>
<script type="application/json" id="data">)";

constexpr const char* kTail = R"(</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const T = data.tokens.length, L = data.layer_ids.length, H = data.head_ids.length;
const w = (l, h, i, j) => data.weights[((l * H + h) * T + i) * T + j];
const shade = x => `rgba(40, 70, 200, ${Math.min(1, Math.max(0, x)).toFixed(3)})`;
document.getElementById("title").textContent = data.title;
const grid = document.getElementById("grid");
grid.style.gridTemplateColumns = `repeat(${H}, minmax(0, 1fr))`;
const toks = data.tokens.map((t, i) => {
  const s = document.createElement("span");
  s.className = "tok"; s.textContent = t; s.tabIndex = 0; s.dataset.index = i;
  s.addEventListener("mouseenter", () => select(i));
  s.addEventListener("focus", () => select(i));
  s.addEventListener("click", () => select(i));
  document.getElementById("prompt").appendChild(s);
  return s;
});
const panels = [];
for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
  const p = document.createElement("div"); p.className = "panel";
  const title = document.createElement("h2");
  title.textContent = `layer ${data.layer_ids[l]} · head ${data.head_ids[h]}`;
  const keys = document.createElement("div"); keys.className = "keys";
  const cells = data.tokens.map((t, j) => {
    const k = document.createElement("span"); k.className = "key";
    const label = document.createElement("span"); label.textContent = t;
    const v = document.createElement("span"); v.className = "w";
    v.dataset.layer = data.layer_ids[l]; v.dataset.head = data.head_ids[h]; v.dataset.key = j;
    k.append(label, v); keys.appendChild(k);
    return { k, v };
  });
  // The heatmap, one pixel per weight scaled up, and the outline of the
  // selected query's row over it.
  const map = document.createElement("div"); map.className = "map";
  const c = document.createElement("canvas"); c.width = T; c.height = T;
  const row = document.createElement("div"); row.className = "row";
  row.style.height = `${100 / T}%`;
  map.append(c, row);
  const g = c.getContext("2d");
  for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
    g.fillStyle = shade(w(l, h, i, j)); g.fillRect(j, i, 1, 1);
  }
  p.append(title, keys, map); grid.appendChild(p);
  panels.push({ l, h, cells, row });
}
function select(i) {
  toks.forEach((s, k) => s.classList.toggle("sel", k === i));
  for (const P of panels) {
    P.row.style.top = `${(100 * i) / T}%`;
    P.cells.forEach(({ k, v }, j) => {
      // An encoder's token reads the later tokens too; a causal model's
      // cannot, and they show no number.
      const read = !data.causal || j <= i;
      const x = read ? w(P.l, P.h, i, j) : 0;
      k.style.background = shade(x);
      k.style.color = x > 0.5 ? "#fff" : "#222";
      v.textContent = read ? x.toFixed(3) : "";
      v.dataset.query = i;
    });
  }
  document.body.dataset.selected = i;
}
select(T - 1);
</script></body></html>
)";

}  // namespace

void write_attention_html(const std::string& path, const AttentionPage& page) {
  const Tensor& m = page.maps;
  if (m.rank() != 4 || m.dim(2) != m.dim(3))
    throw Error("attention page: expected maps [layers, heads, T, T], found " + shape_str(m.shape()));
  const int64_t L = m.dim(0), H = m.dim(1), T = m.dim(2);
  if (L < 1 || H < 1 || T < 1)
    throw Error("attention page: nothing to show in maps " + shape_str(m.shape()));
  if (static_cast<int64_t>(page.tokens.size()) != T)
    throw Error("attention page: " + std::to_string(page.tokens.size()) + " token labels for " +
                std::to_string(T) + " positions");
  const auto ids = [](const std::vector<int64_t>& given, int64_t n, const char* what) {
    if (given.empty()) {
      std::vector<int64_t> all(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
      return all;
    }
    if (static_cast<int64_t>(given.size()) != n)
      throw Error(std::string("attention page: ") + std::to_string(given.size()) + " " + what +
                  " ids for " + std::to_string(n) + " " + what + "s in the maps");
    return given;
  };
  const std::vector<int64_t> layer_ids = ids(page.layer_ids, L, "layer");
  const std::vector<int64_t> head_ids = ids(page.head_ids, H, "head");
  nlohmann::json weights = nlohmann::json::array();
  for (int64_t i = 0; i < m.numel(); ++i) {
    const double x = m.get(i);
    if (!std::isfinite(x) || x < -1e-6 || x > 1 + 1e-6)
      throw Error("attention page: weight " + std::to_string(x) + " at " + index_str(m.shape(), i) +
                  " is not in [0, 1]");
    // Four significant decimals: the page shows three, the file stays small.
    weights.push_back(std::round(x * 1e4) / 1e4);
  }
  const nlohmann::json data = {{"title", page.title}, {"tokens", page.tokens}, {"causal", page.causal},
                               {"layer_ids", layer_ids}, {"head_ids", head_ids},
                               {"weights", std::move(weights)}};
  const std::string json = data.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  std::string text;
  text.reserve(json.size());
  for (char c : json) {
    if (c == '<') text += "\\u003c";
    else if (c == '>') text += "\\u003e";
    else if (c == '&') text += "\\u0026";
    else text += c;
  }
  write_file_atomic(path, {kHead, text, kTail});
}

}  // namespace qkv
