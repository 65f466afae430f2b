// io/gguf_kinds.h: how a GGUF metadata value of each type is held in a
// qkv::GgufValue (its rule in qkv/gguf.h), for the reader and the writer.
#pragma once

#include "qkv/gguf.h"

namespace qkv::io {

enum class Kind { unsigned_int, signed_int, real, text, array };

inline Kind kind_of(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::u16: case GgufType::u32: case GgufType::u64: case GgufType::boolean:
      return Kind::unsigned_int;
    case GgufType::i8: case GgufType::i16: case GgufType::i32: case GgufType::i64:
      return Kind::signed_int;
    case GgufType::f32: case GgufType::f64: return Kind::real;
    case GgufType::string: return Kind::text;
    case GgufType::array: break;
  }
  return Kind::array;
}

}  // namespace qkv::io
