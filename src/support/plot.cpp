#include "support/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "qkv/error.h"
#include "viz/raster.h"

namespace qkv {
namespace {

constexpr int kWidth = 720, kHeight = 420;
constexpr int kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;
constexpr Rgb kAxis{60, 60, 60}, kGrid{225, 225, 225}, kTrain{31, 119, 180}, kVal{255, 127, 14};

std::string tick_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 1000 ? "%.0f" : "%.3g", v);
  return buf;
}

// A "nice" step (1, 2 or 5 x 10^k) giving about `n` ticks over [lo, hi].
double nice_step(double lo, double hi, int n) {
  const double raw = (hi - lo) / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10.0 * p;
}

}  // namespace

void write_loss_png(const std::string& path, const std::vector<double>& ti,
                    const std::vector<double>& tl, const std::vector<double>& vi,
                    const std::vector<double>& vl) {
  if (ti.size() != tl.size() || vi.size() != vl.size())
    throw Error("write_loss_png: iteration and loss series differ in length");
  double x0 = 0, x1 = 1, y0 = INFINITY, y1 = -INFINITY;
  for (const auto* xs : {&ti, &vi})
    for (double x : *xs) x1 = std::max(x1, x);
  for (const auto* ys : {&tl, &vl})
    for (double y : *ys)
      if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (!(y0 <= y1)) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-6) y0 -= 0.5, y1 += 0.5;
  // The axes end on ticks: the ranges are widened to whole steps, so both
  // ends of each axis are labelled.
  const double ys = nice_step(y0, y1, 6), xs = nice_step(x0, x1, 8);
  y0 = std::floor(y0 / ys + 1e-9) * ys, y1 = std::ceil(y1 / ys - 1e-9) * ys;
  x1 = std::ceil(x1 / xs - 1e-9) * xs;
  const int pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + static_cast<int>(std::lround((x - x0) / (x1 - x0) * pw)); };
  auto py = [&](double y) { return kTop + ph - static_cast<int>(std::lround((y - y0) / (y1 - y0) * ph)); };

  Canvas cv(kWidth, kHeight);
  for (double y = y0; y <= y1 + ys * 1e-6; y += ys) {
    cv.fill(kLeft, py(y), kLeft + pw, py(y) + 1, kGrid);
    const std::string t = tick_text(y);
    draw_text(cv, kLeft - 8 - text_width(t, 2), py(y) - kCapHeight, t, 2, kAxis);
  }
  for (double x = 0; x <= x1 + xs * 1e-6; x += xs) {
    cv.fill(px(x), kTop, px(x) + 1, kTop + ph, kGrid);
    const std::string t = tick_text(x);
    draw_text(cv, px(x) - text_width(t, 2) / 2, kTop + ph + 8, t, 2, kAxis);
  }
  cv.fill(kLeft, kTop, kLeft + 1, kTop + ph, kAxis);
  cv.fill(kLeft, kTop + ph, kLeft + pw, kTop + ph + 1, kAxis);
  // Every logged point is drawn (a dot), joined by lines: a run with one
  // logged step still shows it.
  for (size_t i = 0; i < tl.size(); ++i) {
    if (!std::isfinite(tl[i])) continue;
    if (i && std::isfinite(tl[i - 1]))
      draw_line(cv, px(ti[i - 1]), py(tl[i - 1]), px(ti[i]), py(tl[i]), kTrain);
    cv.fill(px(ti[i]) - 1, py(tl[i]) - 1, px(ti[i]) + 2, py(tl[i]) + 2, kTrain);
  }
  for (size_t i = 0; i < vl.size(); ++i) {
    if (i) draw_line(cv, px(vi[i - 1]), py(vl[i - 1]), px(vi[i]), py(vl[i]), kVal);
    cv.fill(px(vi[i]) - 3, py(vl[i]) - 3, px(vi[i]) + 4, py(vl[i]) + 4, kVal);
  }
  draw_text(cv, kLeft, 12, "loss", 2, kAxis);
  draw_text(cv, kLeft + pw / 2 - text_width("iteration", 2) / 2, kHeight - 22, "iteration", 2, kAxis);
  const int lx = kLeft + pw - 200;
  cv.fill(lx, 16, lx + 20, 19, kTrain);
  draw_text(cv, lx + 26, 11, "train", 2, kAxis);
  cv.fill(lx + 100, 16, lx + 120, 19, kVal);
  draw_text(cv, lx + 126, 11, "val", 2, kAxis);
  write_png(path, cv);
}

void plot_training_log(const std::string& log_jsonl, const std::string& png_path) {
  using nlohmann::json;
  std::vector<double> ti, tl, vi, vl;
  std::ifstream in(log_jsonl);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("iter")) continue;
    const double it = j["iter"].get<double>();
    if (j.contains("train_loss")) ti.push_back(it), tl.push_back(j["train_loss"].get<double>());
    if (j.contains("val_loss")) vi.push_back(it), vl.push_back(j["val_loss"].get<double>());
  }
  write_loss_png(png_path, ti, tl, vi, vl);
}

}  // namespace qkv
