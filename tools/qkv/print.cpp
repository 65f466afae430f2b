#include "print.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

namespace qkv::cli {
namespace {

// NumPy's default print width; longer rows wrap.
constexpr size_t kLineWidth = 75;

// x with at most `precision` decimals, trailing zeros trimmed but the point
// kept: 1.0 -> "1.", 0.25 -> "0.25", as NumPy's Dragon4 writes it in its
// 'maxprec' mode: the shortest digits that read back as x when there are no
// more than `precision` of them (std::to_chars), else x rounded to
// `precision` decimals. glibc's printf rounds the exact binary value
// half-to-even, as Dragon4 does (checked on 200,000 random values).
std::string trimmed(double x, int precision) {
  char buf[400];
  const auto shortest = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
  std::string s(buf, shortest.ptr);
  const size_t dot = s.find('.');
  if (dot == std::string::npos) return s + ".";
  if (s.size() - dot - 1 <= static_cast<size_t>(precision)) return s;
  std::snprintf(buf, sizeof buf, "%.*f", precision, x);
  s = buf;
  while (s.back() == '0') s.pop_back();
  return s;
}

// Joins already padded cells into NumPy's array text, wrapping as NumPy's
// _formatArray does: a row's elements go on one line until the next one would
// pass the line width (75, less one column per enclosing bracket), then
// continue on a line indented by the row's brackets.
std::string layout(const std::vector<std::string>& cells, int rank, int64_t rows, int64_t cols) {
  const std::string indent(static_cast<size_t>(rank), ' ');
  const size_t width = kLineWidth - static_cast<size_t>(rank);  // room left for "]" closers
  std::string out = rank == 2 ? "[" : "";
  for (int64_t r = 0; r < rows; ++r) {
    if (r) out += "\n ";
    std::string line = indent, text;
    for (int64_t c = 0; c < cols; ++c) {
      const std::string& word = cells[static_cast<size_t>(r * cols + c)];
      // NumPy never wraps a line that holds nothing but its indent.
      if (line.size() + word.size() > width && line.size() > indent.size()) {
        while (!line.empty() && line.back() == ' ') line.pop_back();
        text += line + "\n";
        line = indent;
      }
      line += word;
      if (c + 1 < cols) line += " ";
    }
    text += line;
    out += '[';
    out.append(text, indent.size());
    out += ']';
  }
  if (rank == 2) out += "]";
  return out;
}

void require_rank_1_or_2(const Tensor& t, const char* who) {
  if (t.rank() != 1 && t.rank() != 2)
    throw Error(std::string(who) + ": expected a 1-d or 2-d array, found shape " +
                shape_str(t.shape()));
}

}  // namespace

std::string numpy_str(const Tensor& t, int precision) {
  require_rank_1_or_2(t, "numpy_str");
  // Pass 1: each element's text, split at the point, and the widths NumPy
  // derives from the whole array (not per column).
  std::vector<std::string> text(static_cast<size_t>(t.numel()));
  size_t left = 0, right = 0, special = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = t.get(i);
    std::string& s = text[static_cast<size_t>(i)];
    if (!std::isfinite(x)) {
      s = std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
      special = std::max(special, s.size());
      continue;
    }
    s = trimmed(x, precision);
    const size_t dot = s.find('.');
    left = std::max(left, dot);
    right = std::max(right, s.size() - dot - 1);
  }
  const size_t width = std::max(left + 1 + right, special);
  left = std::max(left, width - 1 - right);  // a wide "-inf" widens the integer part
  // Pass 2: pad each element: integer part right-aligned, fraction left-aligned.
  for (std::string& s : text) {
    const size_t dot = s.find('.');
    if (dot == std::string::npos)
      s = std::string(width - s.size(), ' ') + s;
    else
      s = std::string(left - dot, ' ') + s + std::string(right - (s.size() - dot - 1), ' ');
  }
  return layout(text, t.rank(), t.rank() == 2 ? t.dim(0) : 1, t.dim(-1));
}

std::string numpy_int_str(const Tensor& t) {
  require_rank_1_or_2(t, "numpy_int_str");
  std::vector<std::string> text(static_cast<size_t>(t.numel()));
  size_t width = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    text[static_cast<size_t>(i)] = std::to_string(static_cast<long long>(t.get(i)));
    width = std::max(width, text[static_cast<size_t>(i)].size());
  }
  for (std::string& s : text) s = std::string(width - s.size(), ' ') + s;
  return layout(text, t.rank(), t.rank() == 2 ? t.dim(0) : 1, t.dim(-1));
}

std::string tuple_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string round4_str(double x) {
  std::string s = trimmed(x, 4);
  if (s.back() == '.') s += "0";
  return s;
}

std::string fixed_str(double x, int decimals, int width) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "%*.*f", width, decimals, x);
  return buf;
}

}  // namespace qkv::cli
