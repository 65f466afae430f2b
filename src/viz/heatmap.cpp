// The terminal heatmap, and the checks both heatmap views share.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/heatmap.h"
#include "viz/heatmap_common.h"

namespace qkv {

void check_heatmap(const std::string& what, const double* w, int64_t rows, int64_t cols,
                   const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels) {
  if (rows <= 0 || cols <= 0)
    throw Error(what + ": expected rows and cols > 0, found " + std::to_string(rows) + " x " +
                std::to_string(cols));
  if (rows > std::numeric_limits<int64_t>::max() / cols)
    throw Error(what + ": " + std::to_string(rows) + " x " + std::to_string(cols) + " weights overflow int64");
  if (!w) throw Error(what + ": weights pointer is null");
  auto check_labels = [&](const std::vector<std::string>& labels, int64_t n, const char* axis) {
    if (!labels.empty() && static_cast<int64_t>(labels.size()) != n)
      throw Error(what + ": expected " + std::to_string(n) + " " + axis + " labels (or none), found " +
                  std::to_string(labels.size()));
  };
  check_labels(row_labels, rows, "row");
  check_labels(col_labels, cols, "column");
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (w[i] >= -1e-6 && w[i] <= 1 + 1e-6) continue;  // NaN fails both
    char value[32];
    std::snprintf(value, sizeof value, "%g", w[i]);
    throw Error(what + ": weight at [" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + "] is " +
                value + ", expected a finite value in [0, 1] (attention weights)");
  }
}

std::vector<std::string> labels_or_indices(const std::vector<std::string>& labels, int64_t n) {
  if (!labels.empty()) return labels;
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

std::vector<std::string> display_glyphs(const std::string& s) {
  std::vector<std::string> out;
  // An escape as cells, one per character of its ASCII spelling.
  const auto escape = [&out](const char* format, unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, format, v);
    for (const char* c = buf; *c; ++c) out.emplace_back(1, *c);
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      if (c == '\n' || c == '\t' || c == '\r') escape("\\%c", c == '\n' ? 'n' : c == '\t' ? 't' : 'r');
      else escape("U+%04X", c);
      ++i;
      continue;
    }
    const size_t n = c < 0x80 ? 1 : c >= 0xf8 ? 0 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (!ok) {
      escape("\\x%02x", c);
      ++i;
      continue;
    }
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    // Overlong forms (C0 9B would be ESC's), surrogates and code points past
    // U+10FFFF are not UTF-8 either (Unicode's Table 3-7): their lead byte
    // as an escape, like any other malformed byte.
    static constexpr uint32_t kShortest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kShortest[n] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) {
      escape("\\x%02x", c);
      ++i;
      continue;
    }
    // C1 controls (U+0080-9F; U+009B is a CSI to some terminals) and the
    // bidirectional controls (U+061C, U+200E-F, U+202A-E, U+2066-9), which
    // would reorder the rest of the terminal line: shown, never acted on.
    const bool control = (cp >= 0x80 && cp < 0xa0) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
                         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
    if (control) escape("U+%04X", cp);
    else out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

namespace {

constexpr int kMaxRowLabel = 12;  // characters
constexpr int kMaxColLabel = 8;   // lines of a vertical column label
constexpr int64_t kMaxNumberCols = 40;
constexpr char kRamp[] = " .:-=+*#%@";
// ANSI 256-colour cube entries from white through light blue to navy, so
// that darker means more weight, as on paper.
constexpr int kPalette[10] = {231, 189, 153, 117, 111, 75, 69, 33, 26, 19};
constexpr int kFirstDarkLevel = 6;  // from here on, white text reads better

int level(double w) { return std::min(9, static_cast<int>(clamp01(w) * 10)); }

// `g` cut to `width` cells, the last one '…' when cut.
std::vector<std::string> cut(std::vector<std::string> g, size_t width) {
  if (g.size() > width) {
    g.resize(width);
    if (width > 0) g.back() = "\u2026";
  }
  return g;
}

// `g` cut and padded to exactly `width` cells.
std::string fit(const std::vector<std::string>& g, size_t width, bool right_align) {
  std::string s;
  const std::vector<std::string> c = cut(g, width);
  for (const auto& ch : c) s += ch;
  const std::string pad(width - c.size(), ' ');
  return right_align ? pad + s : s + pad;
}

std::string ansi(int bg, int fg) {
  return "\x1b[48;5;" + std::to_string(bg) + ";38;5;" + std::to_string(fg) + "m";
}

// Percent in three characters: "100", " 42", "  0"; exactly zero (a masked
// key, say) is "  ." so it stands apart from a small weight.
std::string percent(double w) {
  if (w <= 0) return "  .";
  const std::string p = std::to_string(std::lround(clamp01(w) * 100));
  return std::string(3 - p.size(), ' ') + p;
}

std::string cell(double w, bool color, bool numbers) {
  const int lv = level(w);
  if (!color) return numbers ? kRamp[lv] + percent(w) : std::string(1, kRamp[lv]);
  return ansi(kPalette[lv], lv >= kFirstDarkLevel ? 231 : 16) + (numbers ? percent(w) : " ");
}

// Column labels across one line when they all fit in a cell, else written
// downwards, one character per line, top-aligned.
std::string column_header(const std::vector<std::string>& labels, size_t indent, size_t cell_w) {
  std::vector<std::vector<std::string>> g;
  size_t longest = 0;
  for (const auto& l : labels) {
    g.push_back(display_glyphs(l));
    longest = std::max(longest, g.back().size());
  }
  std::string out;
  if (longest < cell_w) {
    out += std::string(indent, ' ');
    for (const auto& l : g) out += fit(l, cell_w, true);
    return out + "\n";
  }
  const size_t lines = std::min<size_t>(longest, kMaxColLabel);
  for (size_t i = 0; i < lines; ++i) {
    std::string line(indent, ' ');
    for (const auto& l : g) {
      const std::vector<std::string> c = cut(l, lines);
      line += std::string(cell_w / 2, ' ') + (i < c.size() ? c[i] : " ") + std::string(cell_w - cell_w / 2 - 1, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string legend(bool color, bool numbers) {
  std::string out = "0 ";
  for (int lv = 0; lv < 10; ++lv)
    out += color ? ansi(kPalette[lv], 16) + "  " : std::string(1, kRamp[lv]);
  out += color ? "\x1b[0m 1" : " 1";
  if (numbers) out += "   (numbers: weight in %, '.' = exactly 0)";
  return out + "\n";
}

}  // namespace

std::string heatmap_text(const double* w, int64_t rows, int64_t cols, const std::vector<std::string>& row_labels,
                         const std::vector<std::string>& col_labels, bool color) {
  check_heatmap("heatmap_text", w, rows, cols, row_labels, col_labels);
  const std::vector<std::string> rl = labels_or_indices(row_labels, rows);
  const std::vector<std::string> cl = labels_or_indices(col_labels, cols);
  const bool numbers = cols <= kMaxNumberCols;
  const size_t cell_w = numbers ? (color ? 3 : 4) : 1;
  size_t label_w = 1;
  for (const auto& l : rl) label_w = std::max(label_w, display_glyphs(l).size());
  label_w = std::min<size_t>(label_w, kMaxRowLabel);

  std::string out = column_header(cl, label_w + 1, cell_w);
  for (int64_t r = 0; r < rows; ++r) {
    out += fit(display_glyphs(rl[r]), label_w, false) + " ";
    for (int64_t c = 0; c < cols; ++c) out += cell(w[r * cols + c], color, numbers);
    out += color ? "\x1b[0m\n" : "\n";
  }
  return out + legend(color, numbers);
}

}  // namespace qkv
