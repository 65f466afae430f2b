// The PNG heatmap: layout, drawing, encoding.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "qkv/error.h"
#include "qkv/heatmap.h"
#include "viz/heatmap_common.h"
#include "viz/heatmap_layout.h"
#include "viz/raster.h"

namespace qkv {
namespace {

constexpr int kMargin = 16;
constexpr int kGap = 40;          // between panels
constexpr int kPad = 6;           // between a label and what it labels
constexpr int kGridTarget = 480;  // pixels for the longest side of a grid
constexpr int kMaxCell = 48;
constexpr int64_t kReadableTokens = 64;
constexpr int kTitleScale = 2;
constexpr int kBarWidth = 16;
constexpr int kMinBarHeight = 120;
constexpr size_t kMaxLabelChars = 12;
// Keeps the RGB buffer under 1 GiB and every coordinate well inside int.
constexpr int64_t kMaxPixels = int64_t{1} << 28;
constexpr Rgb kInk{40, 40, 40};

std::string panel_name(size_t i, const HeatmapPanel& p) {
  return "heatmap panel " + std::to_string(i) + (p.title.empty() ? "" : " '" + p.title + "'");
}

// Black or white, whichever reads better on `c`.
Rgb text_color_on(Rgb c) {
  const double luma = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
  return luma > 128 ? Rgb{0, 0, 0} : Rgb{255, 255, 255};
}

void draw_panel(Canvas& cv, const HeatmapLayout& L, const HeatmapLayout::Panel& at, const HeatmapPanel& p) {
  const int cell = L.cell, scale = L.label_scale;
  const int grid_w = static_cast<int>(p.cols) * cell;
  const int slot_w = L.row_label_w + grid_w;

  const std::string title = font_text(p.title, static_cast<size_t>(slot_w / (6 * kTitleScale)));
  const int title_x = at.grid_x + (grid_w - text_width(title, kTitleScale)) / 2;
  draw_text(cv, std::max(at.x, title_x), at.y + kPad, title, kTitleScale, kInk);

  // Cells, with the weight in percent inside when there is room.
  const int num_scale = cell >= 40 ? 2 : 1;
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t c = 0; c < p.cols; ++c) {
      const double w = p.w[r * p.cols + c];
      const Rgb color = colormap(w);
      const int x = at.grid_x + static_cast<int>(c) * cell, y = at.grid_y + static_cast<int>(r) * cell;
      cv.fill(x, y, x + cell, y + cell, color);
      if (cell < 24 || w <= 0) continue;
      const std::string num = std::to_string(std::lround(clamp01(w) * 100));
      draw_text(cv, x + (cell - text_width(num, num_scale)) / 2, y + (cell - kCapHeight * num_scale) / 2, num,
                num_scale, text_color_on(color));
    }
  }

  const std::vector<std::string> rl = labels_or_indices(p.row_labels, p.rows);
  for (int64_t r = 0; r < p.rows; r += L.label_every) {
    const std::string s = font_text(rl[r], kMaxLabelChars);
    draw_text(cv, at.grid_x - kPad - text_width(s, scale),
              at.grid_y + static_cast<int>(r) * cell + (cell - kCapHeight * scale) / 2, s, scale, kInk);
  }
  const std::vector<std::string> cl = labels_or_indices(p.col_labels, p.cols);
  for (int64_t c = 0; c < p.cols; c += L.label_every) {
    const std::string s = font_text(cl[c], kMaxLabelChars);
    const int x = at.grid_x + static_cast<int>(c) * cell;
    if (L.vertical_cols)
      draw_text(cv, x + (cell - kCapHeight * scale) / 2, at.grid_y - kPad, s, scale, kInk, true);
    else
      draw_text(cv, x + (cell - text_width(s, scale)) / 2, at.grid_y - kPad - kCapHeight * scale, s, scale, kInk);
  }
}

// The map from 1 (top) down to 0, outlined, with ticks at 0, 0.5 and 1.
void draw_colorbar(Canvas& cv, const HeatmapLayout& L) {
  cv.fill(L.bar_x - 1, L.bar_y - 1, L.bar_x + L.bar_w + 1, L.bar_y + L.bar_h + 1, kInk);
  for (int i = 0; i < L.bar_h; ++i)
    cv.fill(L.bar_x, L.bar_y + i, L.bar_x + L.bar_w, L.bar_y + i + 1, colormap(1.0 - i / (L.bar_h - 1.0)));
  for (const auto& [t, label] : {std::pair{1.0, "1"}, std::pair{0.5, "0.5"}, std::pair{0.0, "0"}}) {
    const int y = L.bar_y + static_cast<int>(std::lround((1 - t) * (L.bar_h - 1)));
    cv.fill(L.bar_x + L.bar_w, y, L.bar_x + L.bar_w + 4, y + 1, kInk);
    draw_text(cv, L.bar_x + L.bar_w + kPad + 2, y - kCapHeight * kTitleScale / 2, label, kTitleScale, kInk);
  }
}

}  // namespace

HeatmapLayout layout_heatmap(const std::vector<HeatmapPanel>& panels, int per_row_max) {
  if (per_row_max < 1)
    throw Error("write_heatmap_png: panels per row must be >= 1, found " + std::to_string(per_row_max));
  if (panels.empty()) throw Error("write_heatmap_png: no panels to draw");
  int64_t max_rows = 0, max_cols = 0;
  for (size_t i = 0; i < panels.size(); ++i) {
    const HeatmapPanel& p = panels[i];
    check_heatmap(panel_name(i, p), p.w, p.rows, p.cols, p.row_labels, p.col_labels);
    max_rows = std::max(max_rows, p.rows);
    max_cols = std::max(max_cols, p.cols);
  }
  if (max_rows > kMaxPixels || max_cols > kMaxPixels)
    throw Error("write_heatmap_png: " + std::to_string(max_rows) + " x " + std::to_string(max_cols) +
                " weights are too many to draw");
  HeatmapLayout L;
  // Up to kReadableTokens per side every token keeps a cell tall enough for
  // its own label (a trained model's 64-token context stays readable); past
  // that the grid shrinks towards kGridTarget and labels thin out.
  const int64_t longest = std::max(max_rows, max_cols);
  const int64_t fit = kGridTarget / longest;
  const int64_t floor = longest <= kReadableTokens ? kLineHeight + 1 : 1;
  L.cell = static_cast<int>(std::clamp<int64_t>(std::max(fit, floor), 1, kMaxCell));
  // Labels at twice the font size need 2 * kLineHeight pixels per cell; on
  // smaller cells use the plain size, and on tiny ones label only every
  // k-th token so that labels never overlap.
  L.label_scale = L.cell >= 2 * kLineHeight ? 2 : 1;
  L.label_every = ((kLineHeight + 1) * L.label_scale + L.cell - 1) / L.cell;

  int row_w = 0, col_w = 0;
  auto widest = [&](const std::vector<std::string>& labels, int64_t n) {
    int w = 0;
    const std::vector<std::string> all = labels_or_indices(labels, n);
    for (int64_t i = 0; i < n; i += L.label_every)
      w = std::max(w, text_width(font_text(all[i], kMaxLabelChars), L.label_scale));
    return w;
  };
  for (const HeatmapPanel& p : panels) {
    row_w = std::max(row_w, widest(p.row_labels, p.rows));
    col_w = std::max(col_w, widest(p.col_labels, p.cols));
  }
  // Column labels go across when every one fits in its cell, else upwards.
  L.vertical_cols = col_w > L.cell - 4;
  L.row_label_w = row_w + kPad;
  L.col_label_h = (L.vertical_cols ? col_w : kLineHeight * L.label_scale) + kPad;
  L.title_h = kLineHeight * kTitleScale + 2 * kPad;

  const int64_t slot_w = L.row_label_w + max_cols * L.cell;
  const int64_t slot_h = L.title_h + L.col_label_h + max_rows * L.cell;
  const int64_t n = static_cast<int64_t>(panels.size());
  const int64_t per_row = std::min<int64_t>(n, per_row_max), grid_rows = (n + per_row_max - 1) / per_row_max;
  const int64_t bar_x = kMargin + per_row * (slot_w + kGap);
  const int64_t bar_h = std::max<int64_t>(max_rows * L.cell, kMinBarHeight);
  const int64_t width = bar_x + kBarWidth + kPad + 2 + text_width("0.5", kTitleScale) + kMargin;
  const int64_t height = std::max(kMargin + grid_rows * slot_h + (grid_rows - 1) * kGap,
                                  kMargin + L.title_h + L.col_label_h + bar_h + kLineHeight * kTitleScale) +
                         kMargin;
  if (width * height > kMaxPixels)
    throw Error("write_heatmap_png: the image would be " + std::to_string(width) + " x " +
                std::to_string(height) + " pixels, more than the limit of " + std::to_string(kMaxPixels));
  L.width = static_cast<int>(width);
  L.height = static_cast<int>(height);
  for (int64_t i = 0; i < n; ++i) {
    HeatmapLayout::Panel at;
    at.x = static_cast<int>(kMargin + (i % per_row_max) * (slot_w + kGap));
    at.y = static_cast<int>(kMargin + (i / per_row_max) * (slot_h + kGap));
    at.grid_x = at.x + L.row_label_w;
    at.grid_y = at.y + L.title_h + L.col_label_h;
    L.panels.push_back(at);
  }
  L.bar_x = static_cast<int>(bar_x);
  L.bar_y = L.panels[0].grid_y;
  L.bar_w = kBarWidth;
  L.bar_h = static_cast<int>(bar_h);
  return L;
}

void write_heatmap_png(const std::string& path, const std::vector<HeatmapPanel>& panels,
                       int per_row) {
  const HeatmapLayout L = layout_heatmap(panels, per_row);
  Canvas cv(L.width, L.height);
  for (size_t i = 0; i < panels.size(); ++i) draw_panel(cv, L, L.panels[i], panels[i]);
  draw_colorbar(cv, L);
  write_png(path, cv);
}

}  // namespace qkv
