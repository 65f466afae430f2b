/// @file
/// qkv/heatmap.h: attention weights as a picture, in a terminal or a PNG.
///
/// Both views take a row-major [rows, cols] matrix of weights in [0, 1] (one
/// softmax row per query: rows are queries, columns are keys) and one label
/// per row and column; empty label vectors mean "number them 0, 1, ...".
/// Inputs are checked (rows, cols > 0, label counts, every value finite and
/// within [0, 1] up to rounding) with qkv::Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/export.h"

namespace qkv {

/// Terminal view: column labels on top (vertical when they do not fit across),
/// row labels on the left, one cell per weight. color=true draws ANSI
/// 256-colour background blocks, light (0) to dark (1); color=false uses the
/// shade ramp " .:-=+*#%@". Up to 40 columns each cell also shows the weight
/// in percent; wider matrices get one character of shade per cell.
QKV_API std::string heatmap_text(const double* w, int64_t rows, int64_t cols,
                                 const std::vector<std::string>& row_labels,
                                 const std::vector<std::string>& col_labels, bool color);

/// One attention head's weights; `w` is borrowed, not owned.
struct HeatmapPanel {
  std::string title;  ///< drawn above the panel
  const double* w = nullptr;  ///< rows x cols weights in [0, 1], row-major
  int64_t rows = 0;  ///< queries
  int64_t cols = 0;  ///< keys
  std::vector<std::string> row_labels;  ///< one per row (the query tokens)
  std::vector<std::string> col_labels;  ///< one per column (the key tokens)
};

/// PNG view: the panels side by side (`per_row` to a row, then wrapping: a
/// model's layers x heads grid is per_row = heads), each cell
/// a square coloured with a viridis-like map (dark purple 0 to yellow 1), token
/// labels on both axes, a title per panel and a 0..1 colour bar at the right.
/// The font draws printable ASCII, '␣' and '…'; any other character is drawn
/// as its code point ("U+00E9"), never as '?'. A label longer than 12 glyphs
/// is cut and ends with '…' (so is the terminal's past 12 cells). Written
/// atomically.
QKV_API void write_heatmap_png(const std::string& path, const std::vector<HeatmapPanel>& panels,
                               int per_row = 4);

}  // namespace qkv
