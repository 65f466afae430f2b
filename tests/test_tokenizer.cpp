#include "qkv/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "qkv/error.h"
#include "qkv/model.h"  // visible_text

using qkv::CharTokenizer;
using Ids = std::vector<int32_t>;

namespace {

// Expects `fn` to throw a qkv::Error whose one-line message contains `part`.
template <class Fn>
void expect_error(Fn fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const qkv::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected: " << part;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD, what the fallback id decodes to

// ---- vocabulary and ids --------------------------------------------------------

TEST(CharTokenizer, VocabularyIsSortedDistinctCharactersLikeNanoGPT) {
  // nanoGPT: chars = sorted(list(set(text))); stoi = {ch: i for i, ch in enumerate(chars)}.
  const CharTokenizer tok = CharTokenizer::from_text("hello world");
  // ' '=0 d=1 e=2 h=3 l=4 o=5 r=6 w=7, then the fallback.
  EXPECT_EQ(tok.vocab_size(), 9);
  EXPECT_EQ(tok.unknown_id(), 8);
  EXPECT_EQ(tok.encode("hello world"), (Ids{3, 2, 4, 4, 5, 0, 7, 5, 6, 4, 1}));
  EXPECT_EQ(tok.decode({0, 1, 2, 3, 4, 5, 6, 7}), " dehlorw");
}

TEST(CharTokenizer, ShakespeareLikeSampleInCodePointOrder) {
  const std::string text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n";
  const CharTokenizer tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.decode({0, 1, 2, 3, 4, 5, 6, 7, 8}), "\n ,.:ABCF");
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(CharTokenizer, MultiByteCharactersAreOneIdEach) {
  // a U+0061, é U+00E9, 中 U+4E2D, 😀 U+1F600: four characters, 1 + 2 + 3 + 4 bytes.
  const std::string text = "\xF0\x9F\x98\x80" "a\xC3\xA9\xE4\xB8\xAD";
  const CharTokenizer tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.vocab_size(), 5);
  EXPECT_EQ(tok.encode(text), (Ids{3, 0, 1, 2}));
  EXPECT_EQ(tok.decode({0, 1, 2, 3}), "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(CharTokenizer, BoundaryCodePointsAreValid) {
  // U+0000, U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF.
  const std::string text = std::string("\0", 1) + "\x7F" "\xC2\x80" "\xDF\xBF" "\xE0\xA0\x80" "\xED\x9F\xBF"
                           "\xEE\x80\x80" "\xEF\xBF\xBF" "\xF0\x90\x80\x80" "\xF4\x8F\xBF\xBF";
  const CharTokenizer tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.vocab_size(), 11);
  EXPECT_EQ(tok.encode(text), (Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(CharTokenizer, UnseenCharactersMapToTheFallbackIdAtTheEnd) {
  const CharTokenizer tok = CharTokenizer::from_text("abc");
  EXPECT_EQ(tok.unknown_id(), 3);
  EXPECT_EQ(tok.encode("azb\xE4\xB8\xAD" "c"), (Ids{0, 3, 1, 3, 2}));
  EXPECT_EQ(tok.decode({0, 3, 1}), "a" + kFffd + "b");
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.decode({}), "");
}

TEST(CharTokenizer, ReplacementCharacterInTheTextIsAnOrdinaryCharacter) {
  // U+FFFD seen in training gets its own id; the fallback still decodes to it.
  const CharTokenizer tok = CharTokenizer::from_text("a" + kFffd);
  EXPECT_EQ(tok.vocab_size(), 3);
  EXPECT_EQ(tok.encode(kFffd + "x"), (Ids{1, 2}));
  EXPECT_EQ(tok.decode({1, 2}), kFffd + kFffd);
}

TEST(CharTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const CharTokenizer tok = CharTokenizer::from_text("hello world");
  expect_error([&] { tok.decode({0, 9}); }, "decode: id 9 at position 1 is outside the vocabulary [0, 9)");
  expect_error([&] { tok.decode({-1}); }, "decode: id -1 at position 0 is outside the vocabulary");
}

TEST(CharTokenizer, EmptyTextHasNoCharacters) {
  expect_error([] { CharTokenizer::from_text(""); }, "no characters");
}

// ---- invalid UTF-8 -------------------------------------------------------------

struct BadUtf8 {
  std::string bytes;
  std::string message;
};

TEST(CharTokenizer, InvalidUtf8NamesTheByteOffset) {
  const std::vector<BadUtf8> cases = {
      {"ab\x80", "invalid UTF-8 at byte 2 of the line: stray continuation byte 0x80 with no lead byte before it"},
      {"\xBF", "at byte 0 of the line: stray continuation byte 0xbf"},
      {"\xC0\xAF", "at byte 0 of the line: overlong encoding 0xc0 0xaf of U+002F (UTF-8 allows only the shortest form)"},
      {"\xC1\xBF", "overlong encoding 0xc1 0xbf of U+007F"},
      {"\xE0\x80\xAF", "overlong encoding 0xe0 0x80 0xaf of U+002F"},
      {"\xE0\x9F\xBF", "overlong encoding 0xe0 0x9f 0xbf of U+07FF"},
      {"\xF0\x82\x82\xAC", "overlong encoding 0xf0 0x82 0x82 0xac of U+20AC"},
      {"x\n\xED\xA0\x80", "at byte 0 of line 2 (byte 2 of the text): 0xed 0xa0 0x80 encodes the UTF-16 surrogate U+D800"},
      {"\xED\xBF\xBF", "encodes the UTF-16 surrogate U+DFFF"},
      {"\xF4\x90\x80\x80", "0xf4 0x90 0x80 0x80 encodes U+110000, beyond U+10FFFF"},
      {"\xF7\xBF\xBF\xBF", "encodes U+1FFFFF, beyond U+10FFFF"},
      {"\xFF", "byte 0xff never occurs in UTF-8"},
      {"\xF8\x88\x80\x80\x80", "byte 0xf8 never occurs in UTF-8"},
      {"ab\xE4\xB8", "at byte 2 of the line: truncated sequence: lead byte 0xe4 starts 3 bytes, the text ends after 2"},
      {"\xF0\x9F\x98", "truncated sequence: lead byte 0xf0 starts 4 bytes, the text ends after 3"},
      {"\xC3", "truncated sequence: lead byte 0xc3 starts 2 bytes, the text ends after 1"},
      {"\xC3(", "lead byte 0xc3 starts 2 bytes, byte 2 is 0x28, not a continuation byte (0x80-0xbf)"},
      {"a\n\nb\xE4\xB8x", "at byte 1 of line 3 (byte 4 of the text): lead byte 0xe4 starts 3 bytes, byte 3 is 0x78"},
      {"ab\xFF\ncd", "at byte 2 of line 1: byte 0xff"},  // the first of several lines
  };
  const CharTokenizer tok = CharTokenizer::from_text("abc");
  for (const BadUtf8& c : cases) {
    SCOPED_TRACE(c.message);
    expect_error([&] { CharTokenizer::from_text(c.bytes); }, c.message);
    expect_error([&] { tok.encode(c.bytes); }, c.message);
  }
}

// The Unicode standard's Table 3-7 (well-formed byte sequences), written
// independently of the decoder, for the exhaustive checks below.
bool well_formed(const std::string& s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = b(i);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c <= 0x7F) n = 1;
    else if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return false;
    if (i + n > s.size()) return false;
    if (n > 1 && (b(i + 1) < lo || b(i + 1) > hi)) return false;
    for (size_t k = 2; k < n; ++k)
      if (b(i + k) < 0x80 || b(i + k) > 0xBF) return false;
    i += n;
  }
  return true;
}

void check_against_table(const std::string& s) {
  bool accepted = true;
  try {
    const CharTokenizer tok = CharTokenizer::from_text(s);
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  } catch (const qkv::Error&) {
    accepted = false;
  }
  std::string hex;
  for (const unsigned char c : s) hex += std::to_string(c) + " ";
  EXPECT_EQ(accepted, well_formed(s)) << hex;
}

TEST(CharTokenizer, AcceptsExactlyWellFormedUtf8EveryTwoByteString) {
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; ++b) check_against_table({static_cast<char>(a), static_cast<char>(b)});
}

TEST(CharTokenizer, AcceptsExactlyWellFormedUtf8ThreeAndFourByteLeads) {
  for (int a = 0xE0; a <= 0xEF; ++a)
    for (int b = 0; b < 256; ++b)
      for (const int c : {0x00, 0x7F, 0x80, 0xBF, 0xC0})
        check_against_table({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
  for (int a = 0xF0; a <= 0xFF; ++a)
    for (int b = 0; b < 256; ++b)
      for (const int c : {0x41, 0x80, 0xBF})
        check_against_table({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c), static_cast<char>(0x80)});
}

// ---- the saved form ----------------------------------------------------------

TEST(CharTokenizer, JsonFormIsOneAsciiLine) {
  const CharTokenizer tok = CharTokenizer::from_text("b\na\"\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(tok.to_json(),
            "{\"type\":\"char\",\"chars\":[\"\\n\",\"\\\"\",\"a\",\"b\",\"\\u00e9\",\"\\ud83d\\ude00\"],"
            "\"unknown\":\"\\ufffd\"}\n");
}

TEST(CharTokenizer, JsonRoundTrip) {
  const std::string text = "To be, or not to be: that is the question.\n\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80" +
                           std::string("\0\x01\x7F", 3) + kFffd;
  const CharTokenizer tok = CharTokenizer::from_text(text);
  const CharTokenizer back = CharTokenizer::from_json(tok.to_json(), "vocab.json");
  EXPECT_EQ(back.vocab_size(), tok.vocab_size());
  EXPECT_EQ(back.to_json(), tok.to_json());
  EXPECT_EQ(back.encode(text), tok.encode(text));
  EXPECT_EQ(back.decode(back.encode(text + "Z")), text + kFffd);
  // Hand-written files may use raw UTF-8, any whitespace and any key order.
  const CharTokenizer hand = CharTokenizer::from_json(
      "\n { \"unknown\" : \"\xEF\xBF\xBD\", \"chars\" : [ \"a\", \"\xC3\xA9\" ], \"type\" : \"char\" } \n", "v");
  EXPECT_EQ(hand.encode("\xC3\xA9" "a?"), (Ids{1, 0, 2}));
}

// nanoGPT's vocabulary (qkv import): exactly the text's characters, no
// fallback id; an unseen character is refused, and the form survives a save.
TEST(CharTokenizer, WithoutUnknownIdIsNanoGptsVocabulary) {
  const CharTokenizer tok = CharTokenizer::from_text("hello world\n", /*unknown_token=*/false);
  EXPECT_FALSE(tok.has_unknown());
  EXPECT_EQ(tok.vocab_size(), 9);  // "\n", " ", d, e, h, l, o, r, w: no id beyond them
  EXPECT_EQ(tok.unknown_id(), -1);
  EXPECT_EQ(tok.encode("hold"), (Ids{4, 6, 5, 2}));
  EXPECT_EQ(tok.decode(tok.encode("world\n")), "world\n");
  expect_error([&] { tok.encode("hex"); }, "character U+0078 at position 2 is not in the vocabulary");
  expect_error([&] { tok.decode({9}); }, "outside the vocabulary [0, 9)");
  EXPECT_EQ(tok.to_json(), "{\"type\":\"char\",\"chars\":[\"\\n\",\" \",\"d\",\"e\",\"h\",\"l\",\"o\",\"r\",\"w\"],\"unknown\":null}\n");
  const CharTokenizer back = CharTokenizer::from_json(tok.to_json(), "vocab.json");
  EXPECT_FALSE(back.has_unknown());
  EXPECT_EQ(back.vocab_size(), tok.vocab_size());
  EXPECT_EQ(back.to_json(), tok.to_json());
}

TEST(CharTokenizer, MalformedJsonIsRefusedWithItsReason) {
  const auto bad = [](const std::string& json, const std::string& part) {
    expect_error([&] { CharTokenizer::from_json(json, "vocab.json"); }, "'vocab.json': bad vocabulary: " + part);
  };
  const std::string unk = ",\"unknown\":\"\\ufffd\"}";
  bad("", "not valid JSON");
  bad("{\"type\":\"char\",\"chars\":[\"a\"]" + unk + " x", "not valid JSON");
  bad("{\"type\":\"char\",\"chars\":[\"a\",]" + unk, "not valid JSON");
  bad("{\"type\":\"char\",\"chars\":[\"\\ud800\"]" + unk, "not valid JSON");  // lone surrogate escape
  bad("{\"type\":\"char\",\"chars\":[\"\xC0\xAF\"]" + unk, "not valid JSON");   // overlong raw UTF-8
  bad("[]", "expected a JSON object, found a JSON array");
  bad("{\"type\":\"char\",\"chars\":[\"a\"]}", "missing \"unknown\"");
  bad("{\"type\":\"char\",\"unknown\":\"\\ufffd\"}", "missing \"chars\"");
  bad("{\"type\":\"char\",\"chars\":[\"a\"],\"extra\":1" + unk, "unexpected key \"extra\"");
  bad("{\"type\":\"char\",\"chars\":[\"a\"],\"unk\\nown\":1" + unk, "unexpected key \"unk\\nown\"");  // stays one line
  bad("{\"type\":\"char\",\"type\":\"char\",\"chars\":[\"a\"]" + unk, "duplicate key \"type\"");
  bad("{\"type\":\"bpe\",\"chars\":[\"a\"]" + unk, "\"type\" must be \"char\" (qkv's character tokenizer), found \"bpe\"");
  bad("{\"type\":\"char\",\"chars\":[\"a\"],\"unknown\":\"?\"}", "\"unknown\" must be \"\\uFFFD\" or null (no fallback id), found \"?\"");
  bad("{\"type\":\"char\",\"chars\":[]" + unk, "\"chars\" must be a non-empty list of one-character strings, found []");
  bad("{\"type\":\"char\",\"chars\":\"ab\"" + unk, "\"chars\" must be a non-empty list of one-character strings, found a JSON string");
  bad("{\"type\":\"char\",\"chars\":[\"a\",1]" + unk, "chars[1] must be a string, found a JSON number");
  bad("{\"type\":\"char\",\"chars\":[\"ab\"]" + unk, "chars[0] must be exactly one character, found 2 in \"ab\"");
  bad("{\"type\":\"char\",\"chars\":[\"\"]" + unk, "chars[0] must be exactly one character, found 0");
  bad("{\"type\":\"char\",\"chars\":[\"b\",\"a\"]" + unk,
      "chars[1] U+0061 does not come after chars[0] U+0062: characters must be distinct and in code-point order");
  bad("{\"type\":\"char\",\"chars\":[\"a\",\"a\"]" + unk, "chars[1] U+0061 does not come after chars[0] U+0061");
  bad("{\"type\":\"char\",\"chars\":[[\"a\"]]" + unk, "JSON nested deeper than 2 levels");
  bad("{\"type\":\"char\",\"chars\":" + std::string(100000, '['), "JSON nested deeper than 2 levels");
}

// ---- tiny Shakespeare ------------------------------------------------------------

TEST(CharTokenizer, TinyShakespeareGivesNanoGPTsVocabulary) {
  const std::filesystem::path path = std::filesystem::path(QKV_SHARED_DATA_DIR) / "tinyshakespeare.txt";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "no " << path.string() << " (the shared tiny Shakespeare copy); nothing to compare with";
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const CharTokenizer tok = CharTokenizer::from_text(text);
  // nanoGPT's data/shakespeare_char/prepare.py: vocab size 65; plus our fallback.
  EXPECT_EQ(tok.vocab_size(), 66);
  EXPECT_EQ(tok.unknown_id(), 65);
  Ids first(65);
  for (int i = 0; i < 65; ++i) first[i] = i;
  EXPECT_EQ(tok.decode(first), "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
  // The ids of nanoGPT's example (Karpathy's "Let's build GPT").
  EXPECT_EQ(tok.encode("hii there"), (Ids{46, 47, 47, 1, 58, 46, 43, 56, 43}));
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

// ---- labels ---------------------------------------------------------------------

TEST(VisibleText, EveryCharacterOfALabelCanBeSeen) {
  // The space is the open box, as in every picture of attention.
  EXPECT_EQ(qkv::visible_text(" the"), "\u2423the");
  EXPECT_EQ(qkv::visible_text("  "), "\u2423\u2423");
  EXPECT_EQ(qkv::visible_text("##ing"), "##ing");
  EXPECT_EQ(qkv::visible_text("[CLS]"), "[CLS]");
  EXPECT_EQ(qkv::visible_text("a\nb\t\r"), "a\\nb\\t\\r");
  EXPECT_EQ(qkv::visible_text(std::string("\0\x01\x1b\x7f", 4)), "U+0000U+0001U+001BU+007F");
  // What draws nothing, or would reorder the line: C1 controls, no-break and
  // other spaces, zero-width and bidirectional controls, a lone combining mark.
  EXPECT_EQ(qkv::visible_text("\u009b\u00a0\u3000\u200b\u202e\u2028\ufeff"),
            "U+009BU+00A0U+3000U+200BU+202EU+2028U+FEFF");
  EXPECT_EQ(qkv::visible_text("\u0301"), "U+0301");
  EXPECT_EQ(qkv::visible_text("e\u0301"), "e\u0301");
  EXPECT_EQ(qkv::visible_text("é世界👍"), "é世界👍");
  // Bytes that are not a whole character: a byte-level token's piece of one.
  EXPECT_EQ(qkv::visible_text("\xE2"), "\\xe2");
  EXPECT_EQ(qkv::visible_text(" \xE2\x82"), "\u2423\\xe2\\x82");
  EXPECT_EQ(qkv::visible_text("\xC0\xAF" "a"), "\\xc0\\xafa");         // overlong
  EXPECT_EQ(qkv::visible_text("\xED\xA0\x80"), "\\xed\\xa0\\x80");     // a surrogate
}

}  // namespace
