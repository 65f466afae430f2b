// Where write_heatmap_png puts things, shared with the tests so that they can
// find a given cell's pixels.
#pragma once

#include <vector>

#include "qkv/heatmap.h"

namespace qkv {

struct HeatmapLayout {
  int width = 0, height = 0;  // of the whole image
  int cell = 0;               // side of one square cell, pixels
  int label_scale = 1;        // font pixels per unit for token labels
  int label_every = 1;        // label every k-th token when cells are small
  bool vertical_cols = false; // column labels turned to read upwards
  int row_label_w = 0, col_label_h = 0, title_h = 0;
  struct Panel {
    int x = 0, y = 0;  // top-left of the panel's slot
    int grid_x = 0, grid_y = 0;  // top-left of cell [0, 0]
  };
  std::vector<Panel> panels;
  int bar_x = 0, bar_y = 0, bar_w = 0, bar_h = 0;  // the 0..1 colour bar
};

// Checks the panels (qkv::Error) and places them.
HeatmapLayout layout_heatmap(const std::vector<HeatmapPanel>& panels, int per_row = 4);

}  // namespace qkv
