#include "viz/raster.h"

#include <stb_image_write.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>

#include "io/files.h"
#include "qkv/error.h"
#include "viz/heatmap_common.h"

// stb_easy_font is a header of static functions; we use only some of them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

namespace qkv {

Canvas::Canvas(int width, int height)
    : width_(width), height_(height), px_(static_cast<size_t>(width) * height * 3, 255) {}

void Canvas::fill(int x0, int y0, int x1, int y1, Rgb c) {
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, width_);
  y1 = std::min(y1, height_);
  for (int y = y0; y < y1; ++y) {
    uint8_t* p = &px_[(static_cast<size_t>(y) * width_ + x0) * 3];
    for (int x = x0; x < x1; ++x, p += 3) {
      p[0] = c.r;
      p[1] = c.g;
      p[2] = c.b;
    }
  }
}

namespace {

// A filled rectangle [x0, x1) x [y0, y1) in font units.
struct FontRect {
  int x0, y0, x1, y1;
};

// Glyphs stb_easy_font lacks, drawn from rectangles on its grid (capitals
// on rows 0-6, a glyph 5 units wide, advancing 6).
struct ExtraGlyph {
  std::string_view utf8;
  std::vector<FontRect> rects;
};
const std::vector<ExtraGlyph>& extra_glyphs() {
  static const std::vector<ExtraGlyph> glyphs = {
      // ␣, the open box of a visible space: a bar on the baseline with two
      // posts, unlike '_', a bare bar below it.
      {"\u2423", {{0, 6, 5, 7}, {0, 4, 1, 6}, {4, 4, 5, 6}}},
      // …, the mark of a cut label: three dots closer than "..." sets them.
      {"\u2026", {{0, 6, 1, 7}, {2, 6, 3, 7}, {4, 6, 5, 7}}},
  };
  return glyphs;
}
constexpr int kExtraAdvance = 6;

// The extra glyph `s` starts with at `at`, or null.
const ExtraGlyph* extra_at(std::string_view s, size_t at) {
  for (const ExtraGlyph& g : extra_glyphs())
    if (s.substr(at, g.utf8.size()) == g.utf8) return &g;
  return nullptr;
}

// One display cell's code point ("é" -> U+00E9); display_glyphs made it whole UTF-8.
std::string code_point_label(const std::string& g) {
  const auto b0 = static_cast<unsigned char>(g[0]);
  uint32_t cp = g.size() == 1 ? b0 : b0 & (0x7fu >> g.size());
  for (size_t k = 1; k < g.size(); ++k) cp = cp << 6 | (static_cast<unsigned char>(g[k]) & 0x3fu);
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", cp);
  return buf;
}

// The rectangles of font_text output `s` laid out from (0, 0), in font
// units; *advance is where a next glyph would start.
std::vector<FontRect> font_rects(std::string_view s, int* advance) {
  std::vector<FontRect> rects;
  int x = 0;
  // The font draws with quads of four (x, y, z, rgba) vertices, 64 bytes,
  // each an axis-aligned rectangle on whole font units. It silently drops
  // quads that do not fit: the most any character needs is 11 ('X',
  // measured over all of ASCII), so allow 16.
  std::vector<char> quads(16 * 64);
  for (size_t i = 0; i < s.size();) {
    if (const ExtraGlyph* g = extra_at(s, i)) {
      for (const FontRect& r : g->rects) rects.push_back({x + r.x0, r.y0, x + r.x1, r.y1});
      x += kExtraAdvance;
      i += g->utf8.size();
      continue;
    }
    char one[2] = {s[i++], 0};
    const int n = stb_easy_font_print(static_cast<float>(x), 0, one, nullptr, quads.data(),
                                      static_cast<int>(quads.size()));
    for (int q = 0; q < n; ++q) {
      const auto* v = reinterpret_cast<const float*>(quads.data() + q * 64);
      // v[0], v[1]: one corner; v[8], v[9]: the opposite one.
      rects.push_back({static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[8]),
                       static_cast<int>(v[9])});
    }
    x += stb_easy_font_width(one);
  }
  *advance = x;
  return rects;
}

}  // namespace

std::string font_text(const std::string& text, size_t max_chars) {
  // Each display cell as the font draws it (its glyphs: one byte each, but
  // for the extra ones).
  std::vector<std::pair<std::string, size_t>> cells;
  size_t total = 0;
  bool after_code_point = false;
  for (const std::string& g : display_glyphs(text)) {
    const bool drawn = (g.size() == 1 && g[0] >= 0x20 && g[0] < 0x7f) || extra_at(g, 0);
    std::string s = drawn ? g : code_point_label(g);
    // A space ends a code point that a hex digit or another code point
    // follows ("U+00E9 1", "U+4E16 U+754C"): a label has no plain spaces of
    // its own (visible_text writes them '␣'), so it cannot be misread.
    if (after_code_point && (!drawn || std::isxdigit(static_cast<unsigned char>(g[0])))) s.insert(0, 1, ' ');
    after_code_point = !drawn;
    const size_t n = drawn && g.size() > 1 ? 1 + (s.size() - g.size()) : s.size();
    cells.emplace_back(std::move(s), n);
    total += n;
  }
  std::string out;
  size_t used = 0;
  for (const auto& [s, n] : cells) {
    // Cut between whole cells, so that a code point is never half spelled.
    if (total > max_chars && used + n + 1 > max_chars) break;
    out += s;
    used += n;
  }
  return total > max_chars && max_chars > 0 ? out + "\u2026" : out;
}

int text_width(const std::string& text, int scale) {
  int advance = 0;
  font_rects(font_text(text, std::string::npos), &advance);
  // The advance counts the spacing after the last glyph; drop it.
  return advance > 0 ? (advance - 1) * scale : 0;
}

void draw_text(Canvas& canvas, int x, int y, const std::string& text, int scale, Rgb color, bool vertical) {
  int advance = 0;
  // Scaling whole font units is exact.
  for (const FontRect& r : font_rects(font_text(text, std::string::npos), &advance)) {
    if (vertical)  // font (fx, fy) -> (x + fy, y - fx)
      canvas.fill(x + r.y0 * scale, y - r.x1 * scale, x + r.y1 * scale, y - r.x0 * scale, color);
    else
      canvas.fill(x + r.x0 * scale, y + r.y0 * scale, x + r.x1 * scale, y + r.y1 * scale, color);
  }
}

Rgb colormap(double t) {
  // matplotlib's viridis at t = 0, 1/8, ..., 1, interpolated linearly.
  static constexpr Rgb kAnchors[9] = {{68, 1, 84},    {72, 40, 120},  {62, 73, 137},
                                      {49, 104, 142}, {38, 130, 142}, {31, 158, 137},
                                      {53, 183, 121}, {110, 206, 88}, {253, 231, 37}};
  const double u = clamp01(t) * 8;
  const int i = std::min(7, static_cast<int>(u));
  const double f = u - i;
  auto mix = [f](uint8_t a, uint8_t b) { return static_cast<uint8_t>(std::lround(a + (b - a) * f)); };
  const Rgb a = kAnchors[i], b = kAnchors[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

namespace {

void append_bytes(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

}  // namespace

void write_png(const std::string& path, const Canvas& cv) {
  std::string png;
  if (!stbi_write_png_to_func(append_bytes, &png, cv.width(), cv.height(), 3, cv.data(),
                              cv.width() * 3))
    throw Error("cannot write '" + path + "': PNG encoding failed");
  write_file_atomic(path, {png});
}

void draw_line(Canvas& canvas, int x0, int y0, int x1, int y1, Rgb c) {
  // Bresenham: one pixel per step along the longer axis.
  const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  for (int err = dx + dy;;) {
    canvas.fill(x0, y0, x0 + 1, y0 + 1, c);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

}  // namespace qkv
