// field_flags.h: the library's errors, worded for the command line.
//
// The library checks every option once and names it by its field
// ("train options: iters must be at least 1, found 0"), so a Python user
// reads the keyword they passed. A command keeps one table from field to
// flag and shows the same check as "--iters: must be at least 1, found 0".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli_common.h"
#include "qkv/error.h"

namespace qkv::cli {

// Field name -> flag, e.g. {"min_lr", "--min-lr"}.
using FieldFlags = std::vector<std::pair<std::string, std::string>>;

// `message` with the library's fields as flags: a leading context such as
// "train options: " is dropped when a field follows it, the field that
// opens the message becomes "--flag:", and any other field named in the
// text becomes its flag. Quoted text (paths, values) is left as it is.
std::string with_flags(const std::string& message, const FieldFlags& flags);

// The attention options named alike by every command that takes them.
inline const FieldFlags kAttentionFlags = {{"causal", "--causal"}, {"kernel", "--kernel"}};

// Runs `check`; a qkv::Error it throws becomes a UsageError (exit 2) in
// the command's words.
template <class Check>
decltype(auto) as_usage(const FieldFlags& flags, Check&& check) {
  try {
    return check();
  } catch (const Error& e) {
    throw UsageError(with_flags(e.what(), flags));
  }
}

// Runs `work`; a qkv::Error it throws is thrown again in the command's
// words, still a qkv::Error (exit 1: the data, not the command line).
template <class Work>
decltype(auto) in_flags(const FieldFlags& flags, Work&& work) {
  try {
    return work();
  } catch (const Error& e) {
    throw Error(with_flags(e.what(), flags));
  }
}

}  // namespace qkv::cli
