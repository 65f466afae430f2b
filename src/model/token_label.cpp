// token_label.cpp: the text a token stands for, as a label in a picture of
// attention shows it (Model::token_label, visible_text).
#include <cstdio>
#include <string>
#include <string_view>

#include <utf8proc.h>

#include "qkv/bpe.h"
#include "qkv/model.h"
#include "qkv/wordpiece.h"

namespace qkv {
namespace {

std::string code_point_label(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  return buf;
}

// Characters that draw nothing a reader could see or tell apart: controls,
// format characters (bidirectional controls, zero-width spaces, the byte
// order mark), line and paragraph separators, spaces other than U+0020, and
// private-use or unassigned code points.
bool invisible(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

bool combining(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

}  // namespace

std::string visible_text(std::string_view bytes) {
  std::string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    utf8proc_int32_t cp = -1;
    const auto n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(bytes.size() - i), &cp);
    if (n <= 0) {  // not part of a whole character: a byte-level token's piece of one
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(bytes[i]));
      out += buf;
      ++i;
      continue;
    }
    const auto c = static_cast<char32_t>(cp);
    if (c == ' ') out += "\u2423";  // ␣, the open box
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    // A combining mark with nothing before it would sit on the label's edge.
    else if (invisible(c) || (out.empty() && combining(c))) out += code_point_label(c);
    else out.append(bytes.substr(i, static_cast<size_t>(n)));
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string Model::token_label(int32_t id) const {
  if (bpe_) return visible_text(bpe_->token_bytes(id));
  return visible_text(token_text(id));  // a WordPiece token keeps its "##"; qkv's a character
}

}  // namespace qkv
