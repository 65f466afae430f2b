// WordPieceTokenizer on small hand-made vocabularies: each stage of BERT's
// pipeline on its own. tests/numpy/test_tokenize.py checks the whole against
// Hugging Face's tokenizers on a real vocabulary.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/error.h"
#include "qkv/wordpiece.h"

namespace {

using qkv::WordPieceTokenizer;
using Ids = std::vector<int32_t>;

// Ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, then the words.
const std::vector<std::string> kVocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able",
                                         "aff", "able", "hello", ",", "!", "cafe", "café", "中", "文", "##s",
                                         "a", "##a", "$", "i", "\xcc\x87" /* U+0307 */, "x"};

std::string vocab_txt() {
  std::string s;
  for (const auto& t : kVocab) s += t + "\n";
  return s;
}

// A tokenizer.json of kVocab; `edit` changes it before it is read.
nlohmann::json spec() {
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = nlohmann::json::array();
  for (int id : {0, 1, 2, 3, 4})
    j["added_tokens"].push_back({{"id", id}, {"content", kVocab[id]}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  j["normalizer"] = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                     {"strip_accents", nullptr}, {"lowercase", true}};
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 3}}, {"cls", {"[CLS]", 2}}};
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < kVocab.size(); ++i) vocab[kVocab[i]] = i;
  j["model"] = {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 100}, {"vocab", vocab}};
  return j;
}

WordPieceTokenizer from(const nlohmann::json& j) { return WordPieceTokenizer::from_json(j.dump(), "tok.json"); }

// The message of the qkv::Error that reading `j` throws.
std::string error_of(const nlohmann::json& j) {
  try {
    from(j);
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(WordPiece, GreedyLongestMatchWithContinuationPrefix) {
  const auto t = from(spec());
  EXPECT_EQ(t.encode("unaffable"), (Ids{2, 5, 6, 7, 3}));  // un ##aff ##able
  EXPECT_EQ(t.encode("aff able"), (Ids{2, 8, 9, 3}));
  EXPECT_EQ(t.encode("aaa"), (Ids{2, 18, 19, 19, 3}));  // a ##a ##a
  EXPECT_EQ(t.encode(""), (Ids{2, 3}));
  EXPECT_EQ(t.token(6), "##aff");
  EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(kVocab.size()));
  EXPECT_EQ(t.cls_id(), 2);
  EXPECT_EQ(t.sep_id(), 3);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.unk_id(), 1);
}

TEST(WordPiece, AWordWithAnUnmatchablePieceIsOneUnknown) {
  const auto t = from(spec());
  // "unaffz": un ##aff match, then "z" matches nothing: the whole word is [UNK].
  EXPECT_EQ(t.encode("unaffz hello"), (Ids{2, 1, 10, 3}));
  EXPECT_EQ(t.encode("zzz"), (Ids{2, 1, 3}));
}

TEST(WordPiece, WordsLongerThanTheLimitAreUnknown) {
  auto j = spec();
  j["model"]["max_input_chars_per_word"] = 3;
  const auto t = from(j);
  EXPECT_EQ(t.encode("aaa"), (Ids{2, 18, 19, 19, 3}));
  EXPECT_EQ(t.encode("aaaa"), (Ids{2, 1, 3}));
  EXPECT_EQ(t.encode("ééé"), (Ids{2, 1, 3}));  // characters, not bytes: "eee" has no pieces
}

TEST(WordPiece, PunctuationIsAWordAndWhitespaceSplits) {
  const auto t = from(spec());
  EXPECT_EQ(t.encode("hello,hello!"), (Ids{2, 10, 11, 10, 12, 3}));
  EXPECT_EQ(t.encode(" \thello\u3000\u00a0hello\r\n"), (Ids{2, 10, 10, 3}));
  EXPECT_EQ(t.encode("a$a"), (Ids{2, 18, 20, 18, 3}));  // ASCII symbols split as BERT's punctuation
}

TEST(WordPiece, AccentsStrippedWhenLowercasing) {
  const auto t = from(spec());
  EXPECT_EQ(t.encode("CAFÉ"), (Ids{2, 13, 3}));        // cafe
  EXPECT_EQ(t.encode("cafe\u0301"), (Ids{2, 13, 3}));  // combining acute dropped
  auto j = spec();
  j["normalizer"]["strip_accents"] = false;
  EXPECT_EQ(from(j).encode("CAFÉ"), (Ids{2, 14, 3}));  // café kept
  // U+0130's lowercase is "i" + U+0307 when accents stay.
  EXPECT_EQ(from(j).encode("\u0130"), (Ids{2, 1, 3}));  // "i\u0307": no "##\u0307" piece
  EXPECT_EQ(t.encode("\u0130"), (Ids{2, 21, 3}));      // stripped: "i"
}

TEST(WordPiece, CjkCharactersAreWordsOfTheirOwn) {
  const auto t = from(spec());
  EXPECT_EQ(t.encode("中文"), (Ids{2, 15, 16, 3}));
  EXPECT_EQ(t.encode("a中a"), (Ids{2, 18, 15, 18, 3}));
  auto j = spec();
  j["normalizer"]["handle_chinese_chars"] = false;
  EXPECT_EQ(from(j).encode("中文"), (Ids{2, 1, 3}));  // one word, no piece "##文"
}

TEST(WordPiece, ControlAndZeroWidthCharactersAreRemoved) {
  const auto t = from(spec());
  // U+0001, U+200B (zero width space), U+FEFF (byte order mark), NUL.
  const std::string text = std::string("hel\x01lo\u200b\ufeff") + std::string(1, '\0') + "!";
  EXPECT_EQ(t.encode(text), (Ids{2, 10, 12, 3}));
  EXPECT_EQ(t.encode("x\xef\xbf\xbdx"), (Ids{2, 1, 3}));  // U+FFFD removed: "xx" has no pieces
}

TEST(WordPiece, SpecialTokensInTheTextAreKeptWhole) {
  const auto t = from(spec());
  EXPECT_EQ(t.encode("hello[MASK]!"), (Ids{2, 10, 4, 12, 3}));
  // Only the exact text: "[mask]" is the words "[", "mask", "]", none in this vocabulary.
  EXPECT_EQ(t.encode("[mask]"), (Ids{2, 1, 1, 1, 3}));
}

TEST(WordPiece, TruncationKeepsTheFirstPiecesAndTheSpecials) {
  const auto t = from(spec());
  bool cut = false;
  EXPECT_EQ(t.encode("hello hello hello", 4, &cut), (Ids{2, 10, 10, 3}));
  EXPECT_TRUE(cut);
  EXPECT_EQ(t.encode("hello hello", 4, &cut), (Ids{2, 10, 10, 3}));
  EXPECT_FALSE(cut);
  EXPECT_EQ(t.encode("hello", 2, &cut), (Ids{2, 3}));
  EXPECT_TRUE(cut);
  EXPECT_THROW(t.encode("hello", 1), qkv::Error);
}

TEST(WordPiece, TemplateProcessingGivesTheSameSpecials) {
  auto j = spec();
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}})");
  EXPECT_EQ(from(j).encode("hello"), (Ids{2, 10, 3}));
  j["post_processor"] = nullptr;
  EXPECT_EQ(from(j).encode("hello"), (Ids{10}));
}

TEST(WordPiece, VocabTxtGivesTheSameIdsAsTheJson) {
  const auto a = from(spec());
  const auto b = WordPieceTokenizer::from_vocab_txt(vocab_txt(), /*lowercase=*/true, "vocab.txt");
  for (const char* text : {"unaffable hello, CAFÉ!", "中文 [MASK] aaa", "zzz \u0130", ""})
    EXPECT_EQ(a.encode(text), b.encode(text)) << text;
  EXPECT_EQ(b.vocab_size(), static_cast<int32_t>(kVocab.size()));
  // CRLF line ends are line ends.
  std::string crlf;
  for (const auto& tok : kVocab) crlf += tok + "\r\n";
  EXPECT_EQ(WordPieceTokenizer::from_vocab_txt(crlf, true, "v").encode("hello"), (Ids{2, 10, 3}));
}

TEST(WordPiece, InvalidUtf8NamesTheByte) {
  const auto t = from(spec());
  try {
    t.encode("hello \xff");
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    // One line (as qkv tokenize and qkv embed give each), whose number the
    // caller adds: only the offset in it, no "line 1" of its own.
    EXPECT_EQ(std::string(e.what()), "invalid UTF-8 at byte 6 of the line: byte 0xff never occurs in UTF-8");
  }
  try {
    t.encode("hello\nworld \xff");
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid UTF-8 at byte 6 of line 2 (byte 12 of the text):"),
              std::string::npos)
        << e.what();
  }
}

TEST(WordPiece, BadFieldsAreErrorsNamingTheField) {
  const auto expect = [](const nlohmann::json& j, const std::string& named) {
    const std::string msg = error_of(j);
    EXPECT_NE(msg.find("'tok.json': "), std::string::npos) << msg;
    EXPECT_NE(msg.find(named), std::string::npos) << "expected " << named << " in: " << msg;
  };
  auto j = spec();
  j["normalizer"] = {{"type", "NFKC"}};
  expect(j, "normalizer.type");
  j = spec();
  j["normalizer"]["lowercase"] = 1;
  expect(j, "normalizer.lowercase");
  j = spec();
  j["normalizer"]["extra"] = true;
  expect(j, "unexpected key \"extra\"");
  j = spec();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect(j, "pre_tokenizer.type");
  j = spec();
  j["model"]["type"] = "BPE";
  expect(j, "model.type");
  j = spec();
  j["model"]["unk_token"] = "<unk>";
  expect(j, "model.unk_token");
  j = spec();
  j["model"]["vocab"]["hello"] = 999;
  expect(j, "model.vocab: ids must be 0 to 23 for its 24 tokens, each once, but no token has id 10 and \"hello\" has 999");
  j = spec();
  j["model"]["vocab"]["hello"] = 0;
  expect(j, "given to two tokens");
  j = spec();
  j["model"]["max_input_chars_per_word"] = 0;
  expect(j, "model.max_input_chars_per_word");
  j = spec();
  j["added_tokens"][4]["lstrip"] = true;
  expect(j, "added_tokens[4].lstrip");
  j = spec();
  j["added_tokens"][4]["content"] = "[MASKED]";
  expect(j, "added_tokens[4]");
  j = spec();
  j["post_processor"] = {{"type", "RobertaProcessing"}};
  expect(j, "post_processor.type");
  j = spec();
  j["post_processor"]["cls"] = {"[CLS]", 5};
  expect(j, "post_processor.cls");
  j = spec();
  j.erase("model");
  expect(j, "missing \"model\"");
  EXPECT_NE(error_of(nlohmann::json::array()).find("expected a JSON object"), std::string::npos);
  EXPECT_THROW(WordPieceTokenizer::from_json("{\"model\": ", "tok.json"), qkv::Error);
}

TEST(WordPiece, VocabTxtNeedsBertsSpecialTokens) {
  EXPECT_THROW(WordPieceTokenizer::from_vocab_txt("[UNK]\n[CLS]\nhello\n", true, "v"), qkv::Error);
  EXPECT_THROW(WordPieceTokenizer::from_folder("/nonexistent/qkv-wordpiece"), qkv::Error);
}

}  // namespace
