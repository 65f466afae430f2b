#include "qkv/heatmap.h"

#include <gtest/gtest.h>
#include <stb/stb_image.h>  // stbi_load; the implementation is in libstb
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "qkv/error.h"
#include "viz/heatmap_layout.h"
#include "viz/raster.h"

namespace fs = std::filesystem;
using qkv::HeatmapPanel;
using qkv::Rgb;

namespace {

const std::vector<std::string> kTokens = {"the", "cat", "sat", "down"};
// Causal attention over "the cat sat down": row 0 puts all weight on "the".
const std::vector<double> kHead0 = {1, 0, 0, 0, 0.6, 0.4, 0, 0, 0.1, 0.7, 0.2, 0, 0.05, 0.25, 0.3, 0.4};
const std::vector<double> kHead1 = {1, 0, 0, 0, 0.9, 0.1, 0, 0, 0.45, 0.05, 0.5, 0, 0.02, 0.08, 0.8, 0.1};

// Throws and the message contains `part`.
template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
  }
}

struct Image {
  int w = 0, h = 0;
  std::vector<uint8_t> px;
  Rgb at(int x, int y) const {
    const uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
    return {p[0], p[1], p[2]};
  }
};

Image load_png(const std::string& path) {
  Image im;
  int channels = 0;
  unsigned char* p = stbi_load(path.c_str(), &im.w, &im.h, &channels, 3);
  if (!p) return im;
  im.px.assign(p, p + static_cast<size_t>(im.w) * im.h * 3);
  stbi_image_free(p);
  return im;
}

class HeatmapPng : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qkv_test_heatmap_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<HeatmapPanel> two_heads() const {
    return {{"head 0", kHead0.data(), 4, 4, kTokens, kTokens}, {"head 1", kHead1.data(), 4, 4, kTokens, kTokens}};
  }
  fs::path dir_;
};

}  // namespace

TEST(HeatmapColormap, RunsFromDarkPurpleToYellow) {
  EXPECT_EQ(qkv::colormap(0), (Rgb{68, 1, 84}));
  EXPECT_EQ(qkv::colormap(1), (Rgb{253, 231, 37}));
  // Perceptually ordered: brightness rises all the way up.
  double last = -1;
  for (int i = 0; i <= 100; ++i) {
    const Rgb c = qkv::colormap(i / 100.0);
    const double luma = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
    EXPECT_GT(luma, last) << i;
    last = luma;
  }
}

TEST_F(HeatmapPng, WritesAReadablePngWithTheExpectedCells) {
  const auto panels = two_heads();
  qkv::write_heatmap_png(path("a.png"), panels);
  const Image im = load_png(path("a.png"));
  const qkv::HeatmapLayout L = qkv::layout_heatmap(panels);
  ASSERT_FALSE(im.px.empty()) << stbi_failure_reason();
  EXPECT_EQ(im.w, L.width);
  EXPECT_EQ(im.h, L.height);
  // Sample near each cell's top-left corner, clear of the number inside.
  auto cell = [&](size_t panel, int r, int c) {
    return im.at(L.panels[panel].grid_x + c * L.cell + 2, L.panels[panel].grid_y + r * L.cell + 2);
  };
  EXPECT_EQ(cell(0, 0, 0), qkv::colormap(1));  // weight 1: top of the map
  EXPECT_EQ(cell(0, 0, 3), qkv::colormap(0));  // weight 0: bottom
  EXPECT_EQ(cell(1, 3, 2), qkv::colormap(0.8));
  EXPECT_EQ(cell(1, 2, 0), qkv::colormap(0.45));
  // Colour bar: 1 at the top, 0 at the bottom.
  EXPECT_EQ(im.at(L.bar_x + 2, L.bar_y), qkv::colormap(1));
  EXPECT_EQ(im.at(L.bar_x + 2, L.bar_y + L.bar_h - 1), qkv::colormap(0));
  // Something was drawn left of row 0 (its label) and above column 0.
  auto inked = [&](int x0, int y0, int x1, int y1) {
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x)
        if (im.at(x, y) != Rgb{255, 255, 255}) return true;
    return false;
  };
  const auto& p0 = L.panels[0];
  EXPECT_TRUE(inked(p0.x, p0.grid_y, p0.grid_x, p0.grid_y + L.cell));
  EXPECT_TRUE(inked(p0.grid_x, p0.grid_y - L.col_label_h, p0.grid_x + L.cell, p0.grid_y));
  EXPECT_TRUE(inked(p0.x, p0.y, p0.x + L.row_label_w + 4 * L.cell, p0.y + L.title_h));
  // Only the PNG is left in the directory: the temporary was renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(HeatmapPng, MoreThanFourPanelsWrapToAGrid) {
  std::vector<HeatmapPanel> panels(6, two_heads()[0]);
  const qkv::HeatmapLayout L = qkv::layout_heatmap(panels);
  EXPECT_EQ(L.panels[4].x, L.panels[0].x);
  EXPECT_GT(L.panels[4].y, L.panels[3].y);
  EXPECT_GT(L.bar_x, L.panels[3].grid_x + 4 * L.cell);
  // Long sequences get small cells and sparser labels, never overlapping.
  std::vector<double> w(300 * 300, 1.0 / 300);
  const qkv::HeatmapLayout big = qkv::layout_heatmap({{"", w.data(), 300, 300, {}, {}}});
  EXPECT_EQ(big.cell, 1);
  EXPECT_GE(big.cell * big.label_every, qkv::kLineHeight);
  qkv::write_heatmap_png(path("big.png"), {{"", w.data(), 300, 300, {}, {}}});
  EXPECT_EQ(load_png(path("big.png")).w, big.width);
}

TEST_F(HeatmapPng, RejectsBadInputsAndUnwritablePaths) {
  const std::vector<double> w = {0.5, 0.5};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> bad = {0.5, nan};
  expect_error([&] { qkv::write_heatmap_png(path("x.png"), {}); }, "no panels");
  expect_error([&] { qkv::write_heatmap_png(path("x.png"), {{"h", w.data(), 0, 2, {}, {}}}); },
               "heatmap panel 0 'h': expected rows and cols > 0, found 0 x 2");
  expect_error([&] { qkv::write_heatmap_png(path("x.png"), {{"h", w.data(), 1, 2, {"a", "b"}, {}}}); },
               "expected 1 row labels (or none), found 2");
  expect_error([&] { qkv::write_heatmap_png(path("x.png"), {{"", bad.data(), 1, 2, {}, {}}}); },
               "heatmap panel 0: weight at [0, 1] is nan");
  expect_error([&] { qkv::write_heatmap_png(path("x.png"), {{"", nullptr, 1, 2, {}, {}}}); }, "null");
  expect_error([&] { qkv::write_heatmap_png(path("no/such/dir.png"), {{"", w.data(), 1, 2, {}, {}}}); },
               "cannot write '" + path("no/such/dir.png") + "': No such file or directory");
  fs::create_directory(path("d"));
  expect_error([&] { qkv::write_heatmap_png(path("d"), {{"", w.data(), 1, 2, {}, {}}}); },
               "cannot write '" + path("d") + "'");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST(HeatmapText, ShowsLabelsShadesAndPercentages) {
  const std::string mono = qkv::heatmap_text(kHead0.data(), 4, 4, kTokens, kTokens, false);
  EXPECT_EQ(mono.find('\x1b'), std::string::npos);
  EXPECT_NE(mono.find("the  @100   .   .   .\n"), std::string::npos) << mono;
  EXPECT_NE(mono.find("down    5: 25- 30= 40\n"), std::string::npos) << mono;
  // "down" does not fit across a cell, so column labels run downwards.
  EXPECT_NE(mono.find("       t   c   s   d\n       h   a   a   o\n"), std::string::npos) << mono;
  EXPECT_NE(mono.find(" .:-=+*#%@"), std::string::npos);  // the legend

  const std::string color = qkv::heatmap_text(kHead0.data(), 4, 4, kTokens, kTokens, true);
  EXPECT_NE(color.find("\x1b[48;5;19;38;5;231m100"), std::string::npos);  // darkest, white text
  EXPECT_NE(color.find("\x1b[48;5;231;38;5;16m  ."), std::string::npos);  // lightest, a zero
  EXPECT_NE(color.find("sat  "), std::string::npos);
}

TEST(HeatmapText, WideMatricesShowShadesOnly) {
  std::vector<double> w(2 * 50);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(i % 50) / 49;
  const std::string s = qkv::heatmap_text(w.data(), 2, 50, {"a", "b"}, {}, false);
  EXPECT_NE(s.find("a      .....:::::-----=====+++++*****#####%%%%%@@@@@\n"), std::string::npos) << s;
  EXPECT_EQ(s.find("100"), std::string::npos);
}

TEST(HeatmapText, LabelsCannotBreakTheLayout) {
  const std::vector<double> w = {0.25, 0.75};
  const std::string s =
      qkv::heatmap_text(w.data(), 2, 1, {"a\nb", "\x1b[31mred and a very long label"}, {"k"}, false);
  EXPECT_EQ(s.find('\x1b'), std::string::npos) << s;
  EXPECT_NE(s.find("a\\nb        "), std::string::npos) << s;
  // Shortened with an ellipsis, the escape character spelled as a code point.
  EXPECT_NE(s.find("U+001B[31mr\u2026 "), std::string::npos) << s;
  // A byte of broken UTF-8 shows as itself, not as a '?' that could be a '?'.
  const std::string b = qkv::heatmap_text(w.data(), 2, 1, {"a\xE2", "?"}, {"k"}, false);
  EXPECT_NE(b.find("a\\xe2 "), std::string::npos) << b;
  // Well-formed in shape but not UTF-8: an overlong ESC (C0 9B, a CSI to some
  // terminals), a surrogate (ED A0 80), a code point past U+10FFFF (F4 90 80 80).
  const std::vector<double> w3 = {0.25, 0.5, 0.25};
  const std::string o =
      qkv::heatmap_text(w3.data(), 3, 1, {"a\xC0\x9B", "\xED\xA0\x80", "\xF4\x90\x80"}, {"k"}, false);
  for (const char* raw : {"\xC0\x9B", "\xED\xA0\x80", "\xF4\x90"}) EXPECT_EQ(o.find(raw), std::string::npos) << o;
  EXPECT_NE(o.find("a\\xc0\\x9b"), std::string::npos) << o;
  EXPECT_NE(o.find("\\xed\\xa0\\x80"), std::string::npos) << o;
  EXPECT_NE(o.find("\\xf4\\x90\\x80"), std::string::npos) << o;
}

TEST(HeatmapText, RejectsBadInputs) {
  const std::vector<double> w = {0.5, 1.5};
  expect_error([&] { qkv::heatmap_text(w.data(), 1, 2, {}, {}, false); },
               "heatmap_text: weight at [0, 1] is 1.5, expected a finite value in [0, 1]");
  expect_error([&] { qkv::heatmap_text(w.data(), 1, 2, {}, {"x"}, false); }, "expected 2 column labels");
  expect_error([&] { qkv::heatmap_text(w.data(), -1, 2, {}, {}, false); }, "expected rows and cols > 0");
  const double inf = std::numeric_limits<double>::infinity();
  expect_error([&] { qkv::heatmap_text(&inf, 1, 1, {}, {}, true); }, "is inf");
}

TEST(HeatmapText, BidiControlsInLabelsShowAsGlyphsNotAct) {
  const std::vector<double> w = {1.0};
  // U+202E RIGHT-TO-LEFT OVERRIDE, U+2066 LEFT-TO-RIGHT ISOLATE, U+200F RLM, U+061C ALM.
  for (const std::string bidi : {"\u202e", "\u2066", "\u200f", "\u061c"}) {
    const std::string s = qkv::heatmap_text(w.data(), 1, 1, {"ab" + bidi + "cd"}, {"k"}, false);
    EXPECT_EQ(s.find(bidi), std::string::npos) << s;
    EXPECT_NE(s.find("abU+"), std::string::npos) << s;
  }
  EXPECT_NE(qkv::heatmap_text(w.data(), 1, 1, {"ab\u202ecd"}, {"k"}, false).find("abU+202Ecd"), std::string::npos);
  // Other multi-byte characters pass as they are.
  const std::string s = qkv::heatmap_text(w.data(), 1, 1, {"é€😀"}, {"k"}, false);
  EXPECT_NE(s.find("é€😀"), std::string::npos) << s;
}

// ---- labels in the PNG ----------------------------------------------------------

namespace {

// `text` drawn at scale 1 on a canvas of its own: its pixels as 0/1.
std::vector<int> drawn(const std::string& text) {
  qkv::Canvas cv(80, qkv::kLineHeight);
  qkv::draw_text(cv, 0, 0, text, 1, {0, 0, 0});
  std::vector<int> ink;
  for (int i = 0; i < cv.width() * cv.height(); ++i) ink.push_back(cv.data()[3 * i] == 0);
  return ink;
}

}  // namespace

TEST(HeatmapFont, CharactersTheFontLacksAreSpelledNeverQuestionMarks) {
  EXPECT_EQ(qkv::font_text("the", 12), "the");
  EXPECT_EQ(qkv::font_text("caf\u00e9", 12), "cafU+00E9");
  EXPECT_EQ(qkv::font_text("\u4e16\u754c", 13), "U+4E16 U+754C");  // a space between, never misread
  EXPECT_EQ(qkv::font_text("\u00e91x", 12), "U+00E9 1x");          // not U+00E91
  EXPECT_EQ(qkv::font_text("\\xe2", 12), "\\xe2");
  for (const std::string& label : std::vector<std::string>{"\u2423What", "\u0120What", "\u2581the", "na\u00efve", "\u4e16", "\U0001F44D",
                                  "a\xE2", std::string("\x01", 1), "\u202e"})
    EXPECT_EQ(qkv::font_text(label, 12).find('?'), std::string::npos) << label;
  // Drawn as the code point, not as '?'.
  EXPECT_EQ(drawn("\u00e9"), drawn("U+00E9"));
  EXPECT_NE(drawn("\u00e9"), drawn("?"));
}

TEST(HeatmapFont, TheVisibleSpaceHasItsOwnShape) {
  EXPECT_EQ(qkv::font_text("\u2423the", 12), "\u2423the");
  const std::vector<int> box = drawn("\u2423"), bar = drawn("_"), blank = drawn(" ");
  EXPECT_NE(box, bar);
  EXPECT_NE(box, blank);
  EXPECT_EQ(qkv::text_width("\u2423", 1), qkv::text_width("a", 1));  // a glyph's width, like a letter
  EXPECT_EQ(qkv::text_width("\u2423the", 1), qkv::text_width("athe", 1));
}

TEST(HeatmapFont, ShortenedLabelsEndInAnEllipsis) {
  EXPECT_EQ(qkv::font_text("\u2423Shakespeare's", 12), "\u2423Shakespear\u2026");
  EXPECT_EQ(qkv::font_text("exactly-12ch", 12), "exactly-12ch");
  // A code point is never cut in the middle: "U+00" would name another character.
  EXPECT_EQ(qkv::font_text("caf\u00e9s", 8), "caf\u2026");
  const std::vector<int> ellipsis = drawn("\u2026"), dots = drawn("..."), tilde = drawn("~");
  EXPECT_NE(ellipsis, dots);
  EXPECT_NE(ellipsis, tilde);
  EXPECT_NE(ellipsis, drawn(" "));
}

