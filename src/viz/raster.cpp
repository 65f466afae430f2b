#include "viz/raster.h"

#include <stb_image_write.h>

#include <algorithm>
#include <cmath>

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

std::string font_text(const std::string& text, size_t max_chars) {
  std::string out;
  for (const std::string& g : display_glyphs(text)) {
    if (g.size() == 1 && g[0] >= 0x20 && g[0] < 0x7f) out += g[0];
    else if (g == "\u2423") out += '_';  // ␣, a visible space: the nearest glyph the font has
    else out += '?';
  }
  if (out.size() > max_chars) {
    out.resize(max_chars);
    if (max_chars > 0) out.back() = '~';
  }
  return out;
}

int text_width(const std::string& text, int scale) {
  std::string s = font_text(text, text.size());
  // stb counts the spacing after the last character; drop it.
  return s.empty() ? 0 : (stb_easy_font_width(s.data()) - 1) * scale;
}

void draw_text(Canvas& canvas, int x, int y, const std::string& text, int scale, Rgb color, bool vertical) {
  std::string s = font_text(text, text.size());
  // The font draws with quads of four (x, y, z, rgba) vertices, 64 bytes,
  // each an axis-aligned rectangle on whole font units, so scaling them is
  // exact. It silently drops quads that do not fit: the most any character
  // needs is 11 ('X', measured over all of ASCII), so allow 16.
  std::vector<char> quads(s.size() * 16 * 64 + 64);
  const int n = stb_easy_font_print(0, 0, s.data(), nullptr, quads.data(), static_cast<int>(quads.size()));
  for (int q = 0; q < n; ++q) {
    const auto* v = reinterpret_cast<const float*>(quads.data() + q * 64);
    const int fx0 = static_cast<int>(v[0]), fy0 = static_cast<int>(v[1]);
    const int fx1 = static_cast<int>(v[8]), fy1 = static_cast<int>(v[9]);  // opposite corner
    if (vertical)  // font (fx, fy) -> (x + fy, y - fx)
      canvas.fill(x + fy0 * scale, y - fx1 * scale, x + fy1 * scale, y - fx0 * scale, color);
    else
      canvas.fill(x + fx0 * scale, y + fy0 * scale, x + fx1 * scale, y + fy1 * scale, color);
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
