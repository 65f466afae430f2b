// train_data.h: the training text as token ids, its train/validation split,
// and the batches drawn from it (qkv train's data, apart from its loop).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "qkv/rng.h"
#include "qkv/tokenizer.h"

namespace qkv::train_data {

// The whole file in one string of its size: no stream buffer and no copies,
// so a large text costs its size once. Errors name --text.
std::string read_text_file(const std::string& path);

// FNV-1a: a fingerprint of the training text, so --resume can refuse another.
uint64_t fnv1a(const std::string& s);

// Batches are drawn from a generator seeded by (seed, stream, index), not
// from one long stream, so iteration i's batch is the same whether or not
// the run was interrupted before it: resuming needs no generator state.
NumpyGenerator batch_rng(uint64_t seed, uint64_t stream, uint64_t index);
constexpr uint64_t kTrainStream = 0, kEvalTrainStream = 1, kEvalValStream = 2;

// The text's token ids in the smallest integer type that holds every id of
// the vocabulary: one byte per character for up to 256 characters, so the
// ids of a large text take about as much memory as the text itself.
using TokenIds = std::variant<std::vector<uint8_t>, std::vector<uint16_t>, std::vector<int32_t>>;
TokenIds encode_text(const CharTokenizer& tok, const std::string& text);
int64_t id_count(const TokenIds& ids);

// A part of the ids: [begin, end).
struct Part {
  const TokenIds* ids;
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};

// 90% train, 10% validation; each must hold a window of T + 1 ids.
struct Split {
  Part train, val;
};
Split split_data(const TokenIds& ids, int64_t T, const std::string& path);

// One global batch of B random windows of `data`: x [B, T] and y (x shifted
// by one). Every rank draws all B windows (the same generator use whatever
// the rank count) and keeps rows [row0, row0 + rows) in x, y [rows, T].
void get_batch(const Part& data, int64_t B, int64_t T, NumpyGenerator& rng, int64_t row0,
               int64_t rows, std::vector<int32_t>& x, std::vector<int32_t>& y);

// The consecutive windows of `data` (ids [i T, i T + T] for i = 0, 1, ...,
// every position predicted once) from window `first`, up to `rows` of them:
// x, y [rows, T]. Returns how many were filled (fewer at the end).
int64_t get_windows(const Part& data, int64_t T, int64_t first, int64_t rows,
                    std::vector<int32_t>& x, std::vector<int32_t>& y);
int64_t window_count(const Part& data, int64_t T);

}  // namespace qkv::train_data
