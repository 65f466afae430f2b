#include "model/train/train_data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qkv/error.h"

namespace qkv::train_data {

std::string read_text_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) throw Error("text_path: '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("text_path: cannot open '" + path + "': " + std::strerror(errno));
  std::string text;
  if (fs::is_regular_file(st)) {
    // A file's size is known: one read into a buffer of that size.
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    in.seekg(0);
    text.resize(static_cast<size_t>(std::max<std::streamoff>(size, 0)));
    if (size < 0 || !in.read(text.data(), size))
      throw Error("text_path: cannot read '" + path + "': read error");
  } else {
    // A pipe, FIFO or /dev/stdin has no size and cannot seek: read to its end.
    std::ostringstream all;
    all << in.rdbuf();
    if (in.bad()) throw Error("text_path: cannot read '" + path + "': read error");
    text = std::move(all).str();
  }
  if (text.empty()) throw Error("text_path: '" + path + "' is empty; training needs text to learn");
  return text;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

NumpyGenerator batch_rng(uint64_t seed, uint64_t stream, uint64_t index) {
  return NumpyGenerator(seed * 1000003ull + stream * 0x9E3779B97F4A7C15ull + index);
}

namespace {

// Encodes `text` a slice at a time (cut before a UTF-8 lead byte) straight
// into the narrow type, so no int32 copy of the whole text ever exists.
template <class Id>
std::vector<Id> encode_narrow(const CharTokenizer& tok, const std::string& text) {
  constexpr size_t kSlice = size_t{1} << 20;
  std::vector<Id> ids;
  ids.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.size(), at + kSlice);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) ++end;
    for (int32_t id : tok.encode(text.substr(at, end - at))) ids.push_back(static_cast<Id>(id));
    at = end;
  }
  ids.shrink_to_fit();
  return ids;
}

}  // namespace

TokenIds encode_text(const CharTokenizer& tok, const std::string& text) {
  if (tok.vocab_size() <= 256) return encode_narrow<uint8_t>(tok, text);
  if (tok.vocab_size() <= 65536) return encode_narrow<uint16_t>(tok, text);
  return encode_narrow<int32_t>(tok, text);
}

int64_t id_count(const TokenIds& ids) {
  return std::visit([](const auto& v) { return static_cast<int64_t>(v.size()); }, ids);
}

Split split_data(const TokenIds& ids, int64_t T, const std::string& path) {
  const int64_t n = id_count(ids), n_train = n * 9 / 10;
  const int64_t need = 10 * (T + 1);  // so the 10% validation part holds one window
  if (n < need)
    throw Error("text_path: '" + path + "' has " + std::to_string(n) + " characters; with context " +
                std::to_string(T) + " it needs at least " + std::to_string(need) +
                " (90% train / 10% validation, each at least context + 1 characters)");
  return Split{Part{&ids, 0, n_train}, Part{&ids, n_train, n}};
}

void get_batch(const Part& data, int64_t B, int64_t T, NumpyGenerator& rng, int64_t row0,
               int64_t rows, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  const int64_t span = data.size() - T;  // windows start in [0, span)
  std::visit(
      [&](const auto& ids) {
        for (int64_t b = 0; b < B; ++b) {
          const int64_t off =
              data.begin + static_cast<int64_t>(rng.random() * static_cast<double>(span));
          if (b < row0 || b >= row0 + rows) continue;  // another rank's row
          std::copy_n(ids.begin() + off, T, x.begin() + (b - row0) * T);
          std::copy_n(ids.begin() + off + 1, T, y.begin() + (b - row0) * T);
        }
      },
      *data.ids);
}

int64_t window_count(const Part& data, int64_t T) { return (data.size() - 1) / T; }

int64_t get_windows(const Part& data, int64_t T, int64_t first, int64_t rows,
                    std::vector<int32_t>& x, std::vector<int32_t>& y) {
  const int64_t n = std::max<int64_t>(0, std::min(rows, window_count(data, T) - first));
  std::visit(
      [&](const auto& ids) {
        for (int64_t r = 0; r < n; ++r) {
          const int64_t off = data.begin + (first + r) * T;
          std::copy_n(ids.begin() + off, T, x.begin() + r * T);
          std::copy_n(ids.begin() + off + 1, T, y.begin() + r * T);
        }
      },
      *data.ids);
  return n;
}

}  // namespace qkv::train_data
