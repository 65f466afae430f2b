// support/attention_page.h: a model's attention as one self-contained HTML page.
//
// The page needs no network and no files beside it: the weights travel
// inside it as JSON, a small script draws them. Hovering (or clicking, or
// tabbing to) a token of the prompt shows, in one panel per layer and head,
// how much that token attends to each token it reads (the earlier ones when
// `causal`; the later ones carry no number): every key token is
// shaded by its weight and carries the weight as text (an element with
// class "w" and data-layer, data-head, data-key attributes, so a test can
// read what the page shows). A full heatmap per panel sits beneath, the
// selected row outlined.
#pragma once

#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv {

struct AttentionPage {
  std::string title;                // e.g. the model directory
  std::vector<std::string> tokens;  // T labels, one per position
  Tensor maps;                      // [layers, heads, T, T] float32 or float64
  // The model's numbers of the layers and heads in `maps`, for a page that
  // shows a selection (e.g. layer 2 only); empty = 0, 1, ... They name the
  // panels and fill the data-layer and data-head attributes.
  std::vector<int64_t> layer_ids, head_ids;
  bool causal = true;  // false: an encoder, whose tokens read every token, both ways
};

// Checks the page (maps 4-D with T x T panels matching the labels, one id
// per layer and head when given, weights finite and within [0, 1] up to
// rounding) and writes it atomically. Throws
// qkv::Error naming what is wrong.
void write_attention_html(const std::string& path, const AttentionPage& page);

}  // namespace qkv
