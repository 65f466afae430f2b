/// @file
/// qkv/error.h: the exception type the library throws (and Interrupted, the
/// one kind of it that is no error of the input).
///
/// Every check in qkv throws qkv::Error with a message that names the argument,
/// what was expected and what was found, e.g.
///   "k: expected head dim D = 8 (from q), found 7 in shape [2, 5, 7]".
/// The CLI prints it as one line and exits 1 (bad data); usage errors on the
/// command line are the CLI's own business and exit 2.
#pragma once

#include <stdexcept>
#include <string>

#include "qkv/export.h"

namespace qkv {

/// The one exception type of qkv; what() is the whole message, one line.
class QKV_API Error : public std::runtime_error {
 public:
  /// `what`: the argument, what was expected and what was found.
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A call stopped by its thread's InterruptScope (qkv/runtime.h) before it
/// finished; not a problem with the input.
class QKV_API Interrupted : public Error {
 public:
  Interrupted() : Error("interrupted") {}  ///< what() is "interrupted"
};

}  // namespace qkv
