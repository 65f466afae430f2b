// What the text and PNG heatmaps share: input checks and label defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

// Throws qkv::Error, prefixed with `what` (e.g. "heatmap panel 1 'head 1'"),
// unless rows, cols > 0, w is non-null, each label vector is empty or has
// one label per row/column, and every weight is finite and within [0, 1]
// (with 1e-6 of slack for rounding in softmax).
void check_heatmap(const std::string& what, const double* w, int64_t rows, int64_t cols,
                   const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels);

// `labels`, or "0", "1", ..., "n-1" when it is empty.
std::vector<std::string> labels_or_indices(const std::vector<std::string>& labels, int64_t n);

// A label as display cells, one character each. Control characters
// (including C1 controls such as U+009B, a CSI to some terminals, and the
// bidirectional controls) become visible escapes, spelled as
// qkv::visible_text spells them ("\n", "U+009B"; a byte of malformed UTF-8
// "\xe2", one cell per character), so a "\n" token cannot break the grid
// and no label can send escape codes. Labels made by visible_text pass
// unchanged.
std::vector<std::string> display_glyphs(const std::string& s);

// A checked weight pulled into [0, 1], so that rounding slack cannot index
// past the end of a palette.
inline double clamp01(double v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }

}  // namespace qkv
