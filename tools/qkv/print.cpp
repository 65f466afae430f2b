#include "print.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace qkv::cli {
namespace {

// "%.4f" with trailing zeros trimmed but the point kept: 1.0 -> "1.", 0.25 -> "0.25".
std::string trimmed4(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", x);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  return s;
}

}  // namespace

std::string numpy_str(const Tensor& t) {
  if (t.rank() != 1 && t.rank() != 2)
    throw Error("numpy_str: expected a 1-d or 2-d array, found shape " + shape_str(t.shape()));
  const int64_t rows = t.rank() == 2 ? t.dim(0) : 1;
  const int64_t cols = t.dim(-1);
  // Pass 1: each element's text, split at the point, and the column widths
  // NumPy derives from the whole array (not per column).
  std::vector<std::string> text(t.numel());
  size_t left = 0, right = 0, special = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = t.get(i);
    if (!std::isfinite(x)) {
      text[i] = std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
      special = std::max(special, text[i].size());
      continue;
    }
    text[i] = trimmed4(x);
    const size_t dot = text[i].find('.');
    left = std::max(left, dot);
    right = std::max(right, text[i].size() - dot - 1);
  }
  const size_t width = std::max(left + 1 + right, special);
  left = std::max(left, width - 1 - right);  // a wide "-inf" widens the integer part
  // Pass 2: pad each element: integer part right-aligned, fraction left-aligned.
  auto cell = [&](int64_t i) {
    const std::string& s = text[i];
    const size_t dot = s.find('.');
    if (dot == std::string::npos) return std::string(width - s.size(), ' ') + s;
    return std::string(left - dot, ' ') + s + std::string(right - (s.size() - dot - 1), ' ');
  };
  std::string out = t.rank() == 2 ? "[" : "";
  for (int64_t r = 0; r < rows; ++r) {
    if (r) out += "\n ";
    out += "[";
    for (int64_t c = 0; c < cols; ++c) {
      if (c) out += " ";
      out += cell(r * cols + c);
    }
    out += "]";
  }
  if (t.rank() == 2) out += "]";
  return out;
}

std::string numpy_int_str(const Tensor& t) {
  if (t.rank() != 2) throw Error("numpy_int_str: expected a 2-d array, found " + shape_str(t.shape()));
  std::string out = "[";
  for (int64_t r = 0; r < t.dim(0); ++r) {
    out += r ? "\n [" : "[";
    for (int64_t c = 0; c < t.dim(1); ++c) {
      if (c) out += " ";
      out += std::to_string(static_cast<long long>(t.get(r * t.dim(1) + c)));
    }
    out += "]";
  }
  return out + "]";
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
  std::string s = trimmed4(x);
  if (s.back() == '.') s += "0";
  return s;
}

}  // namespace qkv::cli
