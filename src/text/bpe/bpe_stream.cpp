// A BPE tokenizer's text token by token: which ids' text is final as ids
// arrive (BpeTokenizer::settled), the pieces that add up to decode(ids)
// (BpeTextStream), and the bytes one token stands for (token_bytes).
#include <algorithm>
#include <string>
#include <vector>

#include "text/bpe/bpe_impl.h"
#include "qkv/bpe.h"
#include "qkv/error.h"

namespace qkv {
namespace {

using Kind = bpe::DecodeStep::Kind;

// Whether every decoder step leaves the text of earlier tokens alone when
// tokens are appended, so that the text of a prefix of the ids is a prefix of
// the whole text (byte runs and unfinished characters aside, which settled()
// holds back). A Replace, or a Strip from the back, after a step that fuses
// the tokens into one string (ByteLevel, Fuse) could match across the join,
// so such a decoder streams nothing until the end.
bool decodes_token_by_token(const std::vector<bpe::DecodeStep>& steps) {
  bool fused = false;
  for (const bpe::DecodeStep& s : steps) {
    if (fused && (s.kind == Kind::Replace || (s.kind == Kind::Strip && s.stop > 0))) return false;
    fused = fused || s.kind == Kind::ByteLevel || s.kind == Kind::Fuse;
  }
  return true;
}

bool has_step(const std::vector<bpe::DecodeStep>& steps, Kind kind) {
  for (const bpe::DecodeStep& s : steps)
    if (s.kind == kind) return true;
  return false;
}

}  // namespace

size_t BpeTokenizer::settled(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size() || !t.assigned[static_cast<size_t>(ids[i])])
      throw Error("ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) + " names no token (vocab_size " +
                  std::to_string(vocab_size()) + ")");
  if (!t.has_decoder) return ids.size();  // tokens joined by spaces: each one's text is its own
  if (!decodes_token_by_token(t.decoder)) return 0;
  // Skipped special tokens are not seen by the decoder: a byte run or a
  // character goes on across them.
  const auto skipped = [&](size_t i) { return skip_special && t.special[static_cast<size_t>(ids[i])]; };
  size_t settled = ids.size();
  if (has_step(t.decoder, Kind::ByteFallback)) {
    // A run of <0xNN> tokens decodes as a whole (UTF-8, or one U+FFFD per
    // byte), so the next byte token can change all of it: the trailing run
    // is open until another token ends it.
    for (size_t i = ids.size(); i-- > 0;) {
      if (skipped(i)) continue;
      if (bpe::fallback_byte(t.tokens[static_cast<size_t>(ids[i])]) < 0) break;
      settled = i;
    }
  }
  if (has_step(t.decoder, Kind::ByteLevel)) {
    // The tokens' bytes form one string: an unfinished character at its end
    // (at most 3 bytes, from at most 3 tokens) waits for the bytes that
    // finish it, or for the byte that makes it invalid. Holding back the
    // token that starts it may leave another unfinished character before
    // it (a token can end one character and start the next: "¬â" is AC E2),
    // so the end moves back until the text before it ends whole.
    size_t end = ids.size();
    for (int open = 1; open > 0 && end > 0;) {
      std::string tail;           // the last bytes before `end`, up to 3 tokens' worth
      std::vector<size_t> owner;  // tail[k] came from ids[owner[k]]
      for (size_t i = end; i-- > 0 && tail.size() < 3;) {
        if (skipped(i)) continue;
        const std::string b = bpe::byte_level_bytes(t.tokens[static_cast<size_t>(ids[i])]);
        tail.insert(0, b);
        owner.insert(owner.begin(), b.size(), i);
      }
      open = bpe::unfinished_utf8_tail(tail);
      if (open > 0) end = owner[tail.size() - static_cast<size_t>(open)];
    }
    settled = std::min(settled, end);
  }
  return settled;
}

// Each push() decodes the settled ids from the start: the decoder's steps
// (a Strip of the text's first space, a run of byte tokens) see the whole
// text, so a piece is the difference of two whole decodings: O(tokens) a
// push, string work beside a model's step, which reads every weight.
BpeTextStream::BpeTextStream(BpeTokenizer tok, bool skip_special)
    : tok_(std::move(tok)), skip_special_(skip_special) {}

std::string BpeTextStream::push(int32_t id) {
  tok_.token(id);  // an id that names no token is refused here, not at the end
  ids_.push_back(id);
  const size_t n = tok_.settled(ids_, skip_special_);
  if (n == settled_) return "";
  settled_ = n;
  return take(tok_.decode(std::vector<int32_t>(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n)),
                          skip_special_));
}

std::string BpeTextStream::finish() {
  settled_ = ids_.size();
  return take(tok_.decode(ids_, skip_special_));
}

std::string BpeTextStream::take(const std::string& text) {
  // settled() promises that this holds; a decoder that broke it would have
  // the stream show text that decode() does not give.
  if (text.compare(0, shown_.size(), shown_) != 0)
    throw Error("text stream: the decoded text changed after it was shown (a tokenizer decoder qkv "
                "cannot stream)");
  std::string piece = text.substr(shown_.size());
  shown_ = text;
  return piece;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  std::string t = token(id);  // checks the id
  // The decoder's steps that act on each token alone; Fuse and Strip act on
  // the whole text (Llama's Strip drops the space in front of the text, not
  // of a token), as does Metaspace's dropping of the first token's mark.
  using Kind = bpe::DecodeStep::Kind;
  for (const bpe::DecodeStep& step : impl_->decoder) {
    if (step.kind == Kind::ByteLevel) {
      t = bpe::byte_level_bytes(t);
    } else if (step.kind == Kind::ByteFallback) {
      if (const int b = bpe::fallback_byte(t); b >= 0) t.assign(1, static_cast<char>(b));
    } else if (step.kind == Kind::Replace || step.kind == Kind::Metaspace) {
      bpe::replace_all(t, step.from, step.to);
    }
  }
  return t;
}

}  // namespace qkv
