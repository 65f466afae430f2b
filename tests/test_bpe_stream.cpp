// qkv::BpeTextStream: streamed text is exactly decode(ids), for every chain of
// ids over tokens chosen to end in every kind of unfinished, invalid and
// complete byte sequence, for byte-fallback (Llama 2, Mistral) and byte-level
// (GPT-2, Llama 3) tokenizers, with and without special tokens.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "qkv/bpe.h"
#include "qkv/error.h"

namespace {

using Ids = std::vector<int32_t>;

std::string tokenizer_json(const std::string& vocab, const std::string& decoder, const std::string& model_extra) {
  return R"({"version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false},
                     {"id": 1, "content": "</s>", "special": true, "normalized": false}],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": )" +
         decoder + R"(, "model": {"type": "BPE", "dropout": null, )" + model_extra + R"("vocab": )" + vocab +
         R"(, "merges": []}})";
}

// Bytes chosen to cover each way a sequence can end: ASCII, the leads of 2-,
// 3- and 4-byte characters (E0, ED, F0 and F4 with their narrowed second
// bytes), continuation bytes at both ends of their range, and bytes that never
// occur in UTF-8 (C0, FF).
const std::vector<int> kBytes = {0x41, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xE0, 0xA0, 0xED,
                                 0x9F, 0xBF, 0xF0, 0x80, 0xF4, 0x8F, 0xC0, 0xFF};

std::string hex2(int b) {
  const char* h = "0123456789ABCDEF";
  return std::string(1, h[b >> 4]) + h[b & 15];
}

// Llama 2's tokenizer pipeline: "▁" words, <0xNN> byte tokens, and its
// decoder (▁ to space, byte fallback, fuse, strip one leading space).
qkv::BpeTokenizer byte_fallback() {
  std::string vocab = R"({"<s>": 0, "</s>": 1, "<unk>": 2, "▁a": 3, "b": 4, "▁": 5)";
  int id = 6;
  for (int b : kBytes) vocab += R"(, "<0x)" + hex2(b) + R"(>": )" + std::to_string(id++);
  vocab += "}";
  const std::string decoder = R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";
  return qkv::BpeTokenizer::from_json(
      tokenizer_json(vocab, decoder, R"("unk_token": "<unk>", "byte_fallback": true, )"), "tokenizer.json");
}

// GPT-2's: every token stands for bytes through its printable-character map;
// tokens of one byte each, and a few of several ("Ġa", "Ã©" = é, "âĤ" = E2 82).
qkv::BpeTokenizer byte_level() {
  // GPT-2's characters for the bytes above: printable Latin-1 bytes are
  // themselves, the others (0x80-0xA0, 0xAD) are U+0100 onwards.
  // Tokens that end one character and start the next ("¬â" is AC E2, "Ĥ¬â"
  // 82 AC E2): holding back the second can leave the first unfinished too.
  std::string vocab = R"({"<s>": 0, "</s>": 1, "Ġa": 2, "Ã©": 3, "âĤ": 4, "¬â": 5, "Ĥ¬â": 6)";
  int id = 7;
  for (const char* c : {"A", "Ã", "©", "â", "Ĥ", "¬", "à", "ł", "í", "Ł", "¿", "ð", "Ģ", "ô", "ı", "À", "ÿ"})
    vocab += std::string(R"(, ")") + c + R"(": )" + std::to_string(id++);
  vocab += "}";
  return qkv::BpeTokenizer::from_json(tokenizer_json(vocab, R"({"type": "ByteLevel"})", ""), "tokenizer.json");
}

// Whether `s` is whole UTF-8 characters (a piece never ends inside one).
bool whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Streams every chain of up to `depth` ids drawn from the tokenizer's whole
// vocabulary and checks that the pieces add up to decode(chain), each piece
// whole characters. Every chain is also a prefix of longer ones, so text
// shown after a prefix is checked against each of its continuations.
void check_every_chain(const qkv::BpeTokenizer& tok, int depth, bool skip_special) {
  const int32_t n = tok.vocab_size();
  Ids chain;
  int64_t chains = 0;
  std::function<void()> walk = [&] {
    qkv::BpeTextStream stream(tok, skip_special);
    std::string text;
    for (const int32_t id : chain) {
      const std::string piece = stream.push(id);
      ASSERT_TRUE(whole_utf8(piece)) << "chain of " << chain.size() << ", piece " << testing::PrintToString(piece);
      text += piece;
    }
    const std::string rest = stream.finish();
    text += rest;
    ASSERT_EQ(text, tok.decode(chain, skip_special)) << "ids " << testing::PrintToString(chain);
    ++chains;
    if (static_cast<int>(chain.size()) == depth) return;
    for (int32_t id = 0; id < n; ++id) {
      chain.push_back(id);
      walk();
      chain.pop_back();
      if (testing::Test::HasFatalFailure()) return;
    }
  };
  walk();
  EXPECT_GT(chains, static_cast<int64_t>(n) * n * n);
}

TEST(BpeTextStream, ByteFallbackEveryChainAddsUpToDecode) {
  const qkv::BpeTokenizer tok = byte_fallback();
  check_every_chain(tok, 3, /*skip_special=*/true);
  check_every_chain(tok, 3, /*skip_special=*/false);
}

TEST(BpeTextStream, ByteLevelEveryChainAddsUpToDecode) {
  const qkv::BpeTokenizer tok = byte_level();
  check_every_chain(tok, 3, /*skip_special=*/true);
  check_every_chain(tok, 3, /*skip_special=*/false);
}

// The ids of these byte tokens in byte_fallback()'s vocabulary.
int32_t byte_id(int b) {
  for (size_t i = 0; i < kBytes.size(); ++i)
    if (kBytes[i] == b) return static_cast<int32_t>(6 + i);
  return -1;
}

TEST(BpeTextStream, ByteFallbackHoldsAnOpenRunBack) {
  // "A" as a byte token, then E2: the run [41 E2] is not UTF-8, so decode
  // gives one U+FFFD per byte, the A's too. Showing "A" at once would have
  // shown text that decode() does not give.
  const qkv::BpeTokenizer tok = byte_fallback();
  qkv::BpeTextStream s(tok, true);
  EXPECT_EQ(s.push(3), "a");  // "▁a": the text's leading space stripped, as decode() strips it
  EXPECT_EQ(s.push(byte_id(0x41)), "");
  EXPECT_EQ(s.push(byte_id(0xE2)), "");
  EXPECT_EQ(s.push(4), "\xEF\xBF\xBD\xEF\xBF\xBD" "b");  // "b" ends the run
  EXPECT_EQ(s.push(byte_id(0xE2)), "");
  EXPECT_EQ(s.push(byte_id(0x82)), "");
  EXPECT_EQ(s.push(byte_id(0xAC)), "");
  EXPECT_EQ(s.push(1), "");  // </s>, skipped: the run goes on across it
  EXPECT_EQ(s.finish(), "\xE2\x82\xAC");
  EXPECT_EQ(s.text(), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xE2\x82\xAC");
}

TEST(BpeTextStream, ByteLevelWaitsForTheRestOfACharacter) {
  const qkv::BpeTokenizer tok = byte_level();
  qkv::BpeTextStream s(tok, false);
  EXPECT_EQ(s.push(2), " a");
  EXPECT_EQ(s.push(4), "");          // E2 82: two of the euro sign's three bytes
  EXPECT_EQ(s.push(7), "\xEF\xBF\xBD" "A");  // "A" makes E2 82 invalid: one U+FFFD, as decode() says
  EXPECT_EQ(s.push(3), "\xC3\xA9");  // é, whole in one token
  EXPECT_EQ(s.push(1), "</s>");      // special tokens shown when asked
  EXPECT_EQ(s.finish(), "");
}

TEST(BpeTextStream, ByteLevelHoldsBackAcrossTokensThatEndOneCharacterAndStartTheNext) {
  const qkv::BpeTokenizer tok = byte_level();
  qkv::BpeTextStream s(tok, false);
  EXPECT_EQ(s.push(4), "");  // E2 82
  EXPECT_EQ(s.push(5), "");  // AC E2: the euro sign is whole, but it waits with the E2 after it
  EXPECT_EQ(s.push(6), "");  // 82 AC E2: a second euro sign, and again an E2
  EXPECT_EQ(s.push(7), "\xE2\x82\xAC\xE2\x82\xAC\xEF\xBF\xBD" "A");
  EXPECT_EQ(s.finish(), "");
}

TEST(BpeTextStream, IdsThatNameNoTokenAreRefused) {
  qkv::BpeTextStream s(byte_level(), true);
  EXPECT_THROW(s.push(999), qkv::Error);
  EXPECT_THROW(s.push(-1), qkv::Error);
  EXPECT_THROW(byte_level().settled({2, 999}), qkv::Error);
}

}  // namespace
