// A small RGB canvas: filled rectangles, stb_easy_font text, a colour map.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

struct Rgb {
  uint8_t r, g, b;
  bool operator==(const Rgb&) const = default;
};

class Canvas {
 public:
  Canvas(int width, int height);  // white
  int width() const { return width_; }
  int height() const { return height_; }
  const uint8_t* data() const { return px_.data(); }
  // Fills [x0, x1) x [y0, y1), clipped to the canvas.
  void fill(int x0, int y0, int x1, int y1, Rgb c);

 private:
  int width_, height_;
  std::vector<uint8_t> px_;  // row-major RGB
};

// Encodes the canvas as PNG and writes it atomically (no half-written file
// under `path`, ever); qkv::Error naming `path` on failure.
void write_png(const std::string& path, const Canvas& canvas);

// Draws a straight line one pixel wide (a polyline segment of a plot).
void draw_line(Canvas& canvas, int x0, int y0, int x1, int y1, Rgb c);

// stb_easy_font's glyphs, in font units: capitals and digits span 7 units
// from the top, descenders 2 more; most characters advance 6.
constexpr int kCapHeight = 7;
constexpr int kLineHeight = 9;

// `text` as the font draws it, never a '?' for a character it lacks:
// printable ASCII; '␣' (a visible space, as token labels show it) and '…',
// drawn here as their own shapes; any other character spelled as its code
// point ("é" -> "U+00E9", a space after it where a hex digit or another
// code point follows: "U+4E16 U+754C"); controls and malformed bytes escaped as
// display_glyphs escapes them. Longer than `max_chars` glyphs, it is cut
// between characters and ends with '…'.
std::string font_text(const std::string& text, size_t max_chars);

// Length of font_text(text) in pixels at `scale` pixels per font unit.
int text_width(const std::string& text, int scale);

// Draws font_text(text). Horizontal text has its top-left at (x, y).
// Vertical text is turned a quarter turn anticlockwise and reads upwards
// from (x, y), its bottom-left corner, as rotated axis labels do.
void draw_text(Canvas& canvas, int x, int y, const std::string& text, int scale, Rgb color,
               bool vertical = false);

// A viridis-like sequential map, perceptually ordered: dark purple at 0,
// through blue and green, to yellow at 1.
Rgb colormap(double t);

}  // namespace qkv
