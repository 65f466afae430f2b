// Writing a file so that readers never see it half-written.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace qkv {

// Writes the concatenation of `parts` to a temporary file in the same
// directory as `path`, fsyncs it and renames it over `path`. A crash or an
// error leaves either the old file or the new one, never a mix; on error the
// temporary is removed and qkv::Error names `path` and the reason.
void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts);

}  // namespace qkv
