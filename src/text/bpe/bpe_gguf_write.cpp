// bpe_gguf_write.cpp: a BPE tokenizer as GGUF metadata, the inverse of
// bpe_gguf.cpp (what from_gguf reads back as the same tokenizer, but for
// Qwen2's NFC normalizer, which GGUF does not hold). Byte-level BPE becomes
// GGUF's "gpt2" model (the vocabulary, the merges by rank, the split's
// name), SentencePiece BPE its "llama" model (the pieces, a score each,
// their types); both with the special tokens.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "text/bpe/bpe_impl.h"
#include "qkv/error.h"
#include "qkv/gguf.h"

namespace qkv {
namespace {

constexpr int64_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

[[noreturn]] void cannot(const std::string& what) {
  throw Error("tokenizer: " + what + ", which a GGUF file cannot hold (it holds byte-level BPE with GPT-2's, SmolLM's, "
              "Llama 3's or Qwen2's split and no normalizer, or SentencePiece BPE with byte fallback; at most bos in "
              "front and eos at the end)");
}

// Whether the tokenizer is SentencePiece BPE as transformers converts Llama
// 2's, TinyLlama's or Mistral's: characters (not bytes) merged, unknown
// ones as their byte pieces, and spaces as "▁", by the normalizer
// (Prepend "▁", Replace " " with "▁") or by a Metaspace pre-tokenizer that
// does not split; `space_prefix`: whether a "▁" goes in front of the text.
bool sentencepiece(const BpeTokenizer::Impl& t, bool& space_prefix) {
  const std::string space = "\u2581";
  if (t.model.byte_level || !t.model.byte_fallback || t.model.ignore_merges) return false;
  const auto& n = t.normalizer;
  const auto& p = t.pre_tokenizer;
  const auto replaces_space = [&](const bpe::NormalizeStep& s) { return !s.prepend && !s.nfc && s.from == " " && s.to == space; };
  if (p.empty()) {
    space_prefix = n.size() == 2 && n[0].prepend && n[0].to == space;
    return !n.empty() && n.size() == 1u + space_prefix && replaces_space(n.back());
  }
  using Kind = bpe::PreTokenizeStep::Kind;
  if (!n.empty() || p.size() != 1 || p[0].kind != Kind::Metaspace || p[0].replacement != space || p[0].split) return false;
  space_prefix = p[0].prepend != bpe::PreTokenizeStep::Prepend::Never;
  return true;
}

// The name llama.cpp gives the pre-tokenizer: GPT-2's ByteLevel split (after
// a piece a digit, SmolLM's), or
// Llama 3's Split then ByteLevel without its own split (whose BPE takes a
// word in the vocabulary whole: ignore_merges).
std::string pre_name(const BpeTokenizer::Impl& t) {
  using Kind = bpe::PreTokenizeStep::Kind;
  const auto& p = t.pre_tokenizer;
  const auto plain_byte_level = [](const bpe::PreTokenizeStep& s, bool regex) {
    return s.kind == Kind::ByteLevel && s.use_regex == regex && !s.add_prefix_space &&
           (!regex || s.rule == bpe::SplitRule::Gpt2);
  };
  if (p.size() == 1 && plain_byte_level(p[0], true) && !t.model.ignore_merges) return "gpt-2";
  if (p.size() == 2 && p[0].kind == Kind::Digits && p[0].individual_digits && plain_byte_level(p[1], true) &&
      !t.model.ignore_merges)
    return "smollm";
  const bool split = p.size() == 2 && p[0].kind == Kind::Split && plain_byte_level(p[1], false);
  if (split && p[0].rule == bpe::SplitRule::Llama3 && t.model.ignore_merges) return "llama-bpe";
  if (split && p[0].rule == bpe::SplitRule::Qwen2 && !t.model.ignore_merges) return "qwen2";
  cannot("its pre-tokenizer is neither GPT-2's ByteLevel, SmolLM's Digits + ByteLevel, Llama 3's Split + ByteLevel "
         "(with ignore_merges) nor Qwen2's Split + ByteLevel");
}

// The merges as "left right", by rank.
std::vector<std::string> ranked_merges(const BpeTokenizer::Impl& t) {
  std::vector<std::pair<int32_t, std::string>> ranked;
  ranked.reserve(t.model.merges.size());
  for (const auto& [pair, rank_id] : t.model.merges)
    ranked.emplace_back(rank_id.first, t.tokens[pair >> 32] + " " + t.tokens[pair & 0xffffffffu]);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> merges;
  merges.reserve(ranked.size());
  for (auto& [rank, m] : ranked) merges.push_back(std::move(m));
  return merges;
}

// A SentencePiece score for each piece of the types written: SentencePiece
// merges the adjacent pair whose union scores highest, BPE the pair of
// lowest rank, so a piece scores minus the rank of the first merge that
// makes it (less one: 0 is left to the pieces that are not NORMAL, the
// special, unknown, byte and unused ones, as SentencePiece scores them). A
// NORMAL piece that no merge makes, a single character, scores below every
// merge: SentencePiece never makes a character from two, and nothing else
// is such a piece in a vocabulary that BPE or SentencePiece trained.
std::vector<double> spm_scores(const BpeTokenizer::Impl& t, const std::vector<int64_t>& types) {
  const auto last = -1.0 - static_cast<double>(t.model.merges.size());
  std::vector<double> scores(types.size());
  for (size_t id = 0; id < types.size(); ++id) scores[id] = types[id] == kNormal ? last : 0.0;
  for (const auto& [pair, rank_id] : t.model.merges) {
    const auto [rank, id] = rank_id;
    scores[static_cast<size_t>(id)] = std::max(scores[static_cast<size_t>(id)], -1.0 - rank);
  }
  return scores;
}

}  // namespace

std::vector<std::pair<std::string, GgufValue>> BpeTokenizer::gguf_metadata(int64_t vocab) const {
  const Impl& t = *impl_;
  bool space_prefix = false;
  const bool spm = sentencepiece(t, space_prefix);
  if (!spm && !t.model.byte_level) cannot("it is neither byte-level BPE nor SentencePiece BPE with byte fallback");
  const std::string pre = spm ? "" : pre_name(t);
  // Qwen2's NFC normalizer: llama.cpp's converter drops it, and llama.cpp
  // applies none to a "qwen2" file; any other normalizer would be lost.
  const bool nfc_only = t.normalizer.size() == 1 && t.normalizer[0].nfc;
  if (!spm && !t.normalizer.empty() && !(pre == "qwen2" && nfc_only)) cannot("it has a normalizer");
  const auto n = static_cast<int64_t>(t.tokens.size());
  if (vocab < n) throw Error("tokenizer: " + std::to_string(n) + " tokens, more than the model's " + std::to_string(vocab));
  std::vector<std::string> tokens(static_cast<size_t>(vocab));
  std::vector<int64_t> types(static_cast<size_t>(vocab), kNormal);
  for (int64_t id = 0; id < vocab; ++id) {
    const auto i = static_cast<size_t>(id);
    if (id < n && t.assigned[i]) {
      tokens[i] = t.tokens[i];
      if (spm && bpe::fallback_byte(tokens[i]) >= 0) types[i] = kByte;
    } else {
      tokens[i] = "[PAD" + std::to_string(id) + "]";
      types[i] = kUnused;
    }
  }
  // Without a normalizer, an added token's "normalized" changes nothing.
  for (const bpe::AddedToken& a : t.added) types[static_cast<size_t>(a.id)] = a.special ? kControl : kUserDefined;
  if (spm && t.model.unk >= 0) types[static_cast<size_t>(t.model.unk)] = kUnknown;  // as SentencePiece types it

  std::vector<std::pair<std::string, GgufValue>> out;
  out.emplace_back("tokenizer.ggml.model", GgufValue::string(spm ? "llama" : "gpt2"));
  if (!spm) out.emplace_back("tokenizer.ggml.pre", GgufValue::string(pre));
  out.emplace_back("tokenizer.ggml.tokens", GgufValue::strings(std::move(tokens)));
  if (spm) out.emplace_back("tokenizer.ggml.scores", GgufValue::f32s(spm_scores(t, types)));
  out.emplace_back("tokenizer.ggml.token_type", GgufValue::i32s(std::move(types)));
  if (spm) {
    out.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(space_prefix));
    if (t.model.unk >= 0) out.emplace_back("tokenizer.ggml.unknown_token_id", GgufValue::u32(static_cast<uint32_t>(t.model.unk)));
  } else {
    out.emplace_back("tokenizer.ggml.merges", GgufValue::strings(ranked_merges(t)));
  }
  if (t.bos >= 0) out.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(t.bos)));
  if (t.eos >= 0) out.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(t.eos)));
  const bool add_bos = t.prefix.size() == 1 && t.prefix[0] == t.bos, add_eos = t.suffix.size() == 1 && t.suffix[0] == t.eos;
  if ((!t.prefix.empty() && !add_bos) || (!t.suffix.empty() && !add_eos))
    cannot("its post-processor adds tokens other than bos in front and eos at the end");
  out.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(add_bos));
  out.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(add_eos));
  return out;
}

}  // namespace qkv
