// The BPE model: a word's symbols, merged pair by pair in the order of the
// file's "merges" (lowest rank first, leftmost first among equals).
#include <algorithm>
#include <functional>

#include "text/bpe/bpe_impl.h"

namespace qkv::bpe {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

void BpeModel::encode_word(std::string_view word, MergeScratch& scratch, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The starting symbols: one per byte (byte-level) or per character. A
  // character outside the vocabulary becomes its <0xNN> byte tokens
  // (byte_fallback, when all exist), else the unknown token (consecutive
  // ones fused into one with fuse_unk), else nothing: tokenizers drops it.
  auto& syms = scratch.symbols;
  syms.clear();
  bool last_unknown = false;
  const auto push = [&](int32_t id) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1});
  };
  for (size_t i = 0; i < word.size();) {
    size_t len = 1;
    int32_t id = -1;
    if (byte_level) {
      id = byte_ids[static_cast<unsigned char>(word[i])];
    } else {
      const auto b = static_cast<unsigned char>(word[i]);
      len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      if (const auto it = vocab.find(word.substr(i, len)); it != vocab.end()) id = it->second;
    }
    const std::string_view ch = word.substr(i, len);
    i += len;
    if (id >= 0) {
      push(id);
      last_unknown = false;
      continue;
    }
    if (byte_fallback && std::all_of(ch.begin(), ch.end(),
                                     [&](char c) { return fallback_ids[static_cast<unsigned char>(c)] >= 0; })) {
      for (const char c : ch) push(fallback_ids[static_cast<unsigned char>(c)]);
      last_unknown = false;
      continue;
    }
    if (unk < 0) continue;
    if (!(fuse_unk && last_unknown)) push(unk);
    last_unknown = true;
  }
  for (size_t k = 0; k + 1 < syms.size(); ++k) syms[k].next = static_cast<int32_t>(k + 1);

  // The standard loop: a min-heap of candidate pairs by (rank, position);
  // a candidate whose symbols have changed since it was pushed is stale.
  auto& heap = scratch.heap;
  heap.clear();
  const auto consider = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    const int32_t left = syms[pos].id, right = syms[syms[pos].next].id;
    if (const auto it = merges.find(pair_key(left, right)); it != merges.end()) {
      heap.push_back({it->second.first, pos, left, right});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t k = 0; k + 1 < syms.size(); ++k) consider(static_cast<int32_t>(k));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const MergeScratch::Candidate c = heap.back();
    heap.pop_back();
    auto& s = syms[c.pos];
    if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;  // stale
    const int32_t gone = s.next;
    s.id = merges.find(pair_key(c.left, c.right))->second.second;
    s.next = syms[gone].next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    syms[gone].id = -1;  // no longer in the word: its candidates go stale
    consider(s.prev);
    consider(c.pos);
  }
  for (int32_t k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

}  // namespace qkv::bpe
