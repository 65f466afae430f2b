// demo_print.h: how `qkv demo` writes: arrays as NumPy prints them at the
// chosen precision, and the lessons' f-string numbers with as many extra
// digits as --precision adds to the lessons' 2.
#pragma once

#include <ostream>
#include <string>

#include "print.h"

namespace qkv::cli::demo {

// The lessons print at np.set_printoptions(precision=2).
constexpr int kLessonPrecision = 2;

struct Printer {
  std::ostream& out;
  int precision = kLessonPrecision;

  // Digits added to every number beyond what the lesson shows.
  int extra() const { return precision - kLessonPrecision; }

  void line(const std::string& s) const { out << s << "\n"; }
  void array(const Tensor& t) const { out << numpy_str(t, precision) << "\n"; }
  void ints(const Tensor& t) const { out << numpy_int_str(t) << "\n"; }
  // f"{x:W.Df}" where the lesson wrote W.D; wider and longer with --precision.
  std::string fixed(double x, int lesson_decimals, int lesson_width = 0) const {
    return fixed_str(x, lesson_decimals + extra(), lesson_width ? lesson_width + extra() : 0);
  }
  // f"{x:.0%}" as the lesson writes percentages.
  std::string percent(double x) const { return fixed_str(100.0 * x, extra()) + "%"; }
};

}  // namespace qkv::cli::demo
