// Parsing JSON that came from a file qkv did not write (safetensors headers,
// vocabularies, configs), with the checks nlohmann::json leaves out.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "qkv/export.h"

namespace qkv {

// Not installed, but exported (QKV_API) from libqkv_io.so: the layers above
// (model, viz) read their JSON files with it.

// Parses `text` as exactly one JSON value (surrounding whitespace allowed,
// no comments). Also refuses what nlohmann::json would otherwise accept
// quietly:
//   - a key repeated in one object (nlohmann keeps the last one, so two
//     readers of the same file could disagree about what it holds);
//   - nesting deeper than `max_depth` objects/arrays, checked while parsing,
//     so a hostile "[[[[..." costs nothing.
// Throws qkv::Error with a one-line message and no file name, e.g.
//   "not valid JSON at line 1, column 9: syntax error while parsing ..." or
//   "duplicate key \"dtype\" (inside \"wte\")"; callers add the name.
QKV_API nlohmann::json parse_json_strict(std::string_view text, int max_depth);

// A JSON value for a message: compact, ASCII only, cut to `limit` characters.
QKV_API std::string json_excerpt(const nlohmann::json& j, size_t limit = 60);

}  // namespace qkv
