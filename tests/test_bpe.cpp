// qkv::BpeTokenizer on hand-made tokenizer.json files: the merge order, byte
// fallback, added tokens, decoding, and the errors. tests/numpy/test_bpe.py
// compares it with Hugging Face's tokenizers on trained ones.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/bpe.h"
#include "qkv/error.h"

namespace {

using Ids = std::vector<int32_t>;

// A tokenizer.json with no normalizer and the given pieces.
std::string spec(const std::string& vocab, const std::string& merges, const std::string& pre = "null",
                 const std::string& decoder = "null", const std::string& model_extra = "",
                 const std::string& added = "[]") {
  return R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": )" + added +
         R"(, "normalizer": null, "pre_tokenizer": )" + pre + R"(, "post_processor": null, "decoder": )" +
         decoder + R"(, "model": {"type": "BPE", "dropout": null, )" + model_extra +
         R"("vocab": )" + vocab + R"(, "merges": )" + merges + "}}";
}

qkv::BpeTokenizer load(const std::string& json) { return qkv::BpeTokenizer::from_json(json, "tokenizer.json"); }

// The message of the qkv::Error that `fn` throws ("" when none).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

const char* kAbc = R"({"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "aa": 6})";

TEST(Bpe, MergesInRankOrder) {
  // "b c" ranks first, so "abc" is a + bc, then abc; with "a b" first it is ab + c.
  EXPECT_EQ(load(spec(kAbc, R"(["b c", "a bc"])")).encode("abc"), (Ids{5}));
  EXPECT_EQ(load(spec(kAbc, R"(["a b", "b c"])")).encode("abc"), (Ids{3, 2}));
  EXPECT_EQ(load(spec(kAbc, R"(["b c", "a b"])")).encode("abc"), (Ids{0, 4}));
  // A pair listed twice ranks where it is listed last, as in tokenizers.
  EXPECT_EQ(load(spec(kAbc, R"(["b c", "a b", "b c"])")).encode("abc"), (Ids{3, 2}));
  // Merges as pairs, as tokenizers writes them since 0.20.
  EXPECT_EQ(load(spec(kAbc, R"([["a", "b"], ["ab", "c"]])")).encode("abc"), (Ids{5}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const auto tok = load(spec(kAbc, R"(["a a"])"));
  EXPECT_EQ(tok.encode("aaa"), (Ids{6, 0}));
  EXPECT_EQ(tok.encode("aaaa"), (Ids{6, 6}));
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(Bpe, IgnoreMergesTakesWholeWords) {
  // "abc" is in the vocabulary but no merge builds it from a + bc first.
  const std::string merges = R"(["a b", "b c"])";
  EXPECT_EQ(load(spec(kAbc, merges)).encode("abc"), (Ids{3, 2}));
  EXPECT_EQ(load(spec(kAbc, merges, "null", "null", R"("ignore_merges": true, )")).encode("abc"), (Ids{5}));
}

TEST(Bpe, ByteLevelMapsBytesToCharacters) {
  // "Ġ" stands for the space; GPT-2's split keeps the space with the word after it.
  const auto tok = load(spec(R"({"h": 0, "i": 1, "Ġ": 2, "hi": 3, "Ġhi": 4, "!": 5})", R"(["h i", "Ġ hi"])",
                             R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})",
                             R"({"type": "ByteLevel"})"));
  EXPECT_EQ(tok.encode("hi hi!"), (Ids{3, 4, 5}));
  EXPECT_EQ(tok.decode({3, 4, 5}), "hi hi!");
  EXPECT_EQ(tok.token(4), "Ġhi");
  // A byte missing from the vocabulary is dropped, as tokenizers drops it.
  EXPECT_EQ(tok.encode("hi?"), (Ids{3}));
}

TEST(Bpe, ByteLevelDecodeRepairsBrokenUtf8) {
  // "Ã" stands for byte 0xC3, "©" for 0xA9: together "é"; alone, not UTF-8.
  const auto tok = load(spec(R"({"Ã": 0, "©": 1, "a": 2})", "[]",
                             R"({"type": "ByteLevel", "add_prefix_space": false})", R"({"type": "ByteLevel"})"));
  EXPECT_EQ(tok.encode("é"), (Ids{0, 1}));
  EXPECT_EQ(tok.decode({0, 1}), "é");
  EXPECT_EQ(tok.decode({0, 2}), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(tok.decode({1, 1}), "\xEF\xBF\xBD\xEF\xBF\xBD");  // each stray continuation byte
}

TEST(Bpe, ByteFallbackAndUnknown) {
  const std::string vocab = R"({"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3})";
  const std::string decoder = R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]})";
  const auto tok = load(spec(vocab, "[]", "null", decoder,
                             R"("unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true, )"));
  EXPECT_EQ(tok.encode("aé"), (Ids{1, 2, 3}));  // é is 0xC3 0xA9
  EXPECT_EQ(tok.encode("a€€a"), (Ids{1, 0, 1}));  // € has no byte tokens: one fused unknown
  EXPECT_EQ(tok.decode({1, 2, 3}), "aé");
  EXPECT_EQ(tok.decode({2, 1}), "\xEF\xBF\xBD" "a");
  const auto unfused = load(spec(vocab, "[]", "null", decoder, R"("unk_token": "<unk>", "byte_fallback": true, )"));
  EXPECT_EQ(unfused.encode("€€"), (Ids{0, 0}));
}

TEST(Bpe, AddedTokensAreFoundFirstLongestWins) {
  const std::string added =
      R"([{"id": 7, "content": "<|x|>", "special": true, "normalized": false},
          {"id": 8, "content": "<|x|>a", "special": false, "normalized": false}])";
  const auto tok = load(spec(kAbc, R"(["a b"])", "null", R"({"type": "Fuse"})", "", added));
  EXPECT_EQ(tok.encode("ab<|x|>b"), (Ids{3, 7, 1}));
  EXPECT_EQ(tok.encode("<|x|>ab"), (Ids{8, 1}));
  EXPECT_EQ(tok.encode("<|x|<|x|>"), Ids{7});  // "<", "|", "x" are not in the vocabulary
  EXPECT_EQ(tok.vocab_size(), 9);
  EXPECT_EQ(tok.decode({3, 7, 8}), "ab<|x|><|x|>a");
  EXPECT_EQ(tok.decode({3, 7, 8}, /*skip_special=*/true), "ab<|x|>a");
}

TEST(Bpe, NormalizedAddedTokensAreMatchedNormalized) {
  // Llama 2's normalizer: "▁" in front, spaces as "▁". A normalized added
  // token is looked for as its content normalized ("a b" as "▁a▁b"), in the
  // stretches between the others, each normalized on its own (ids checked
  // with tokenizers 0.23).
  const std::string added =
      R"([{"id": 5, "content": "<s>", "special": true, "normalized": false},
          {"id": 6, "content": "▁b", "normalized": true}, {"id": 7, "content": "a b", "normalized": true}])";
  std::string json = spec(R"({"<unk>": 0, "▁": 1, "a": 2, "b": 3, "▁a": 4})", R"(["▁ a"])", "null", "null",
                          R"("unk_token": "<unk>", )", added);
  const std::string normalizer = R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})";
  json.replace(json.find(R"("normalizer": null)"), 18, R"("normalizer": )" + normalizer);
  const auto tok = load(json);
  EXPECT_EQ(tok.encode("a b"), (Ids{7}));
  EXPECT_EQ(tok.encode("<s>a b"), (Ids{5, 7}));
  EXPECT_EQ(tok.encode("a<s> b"), (Ids{4, 5, 6}));
  EXPECT_EQ(tok.encode("ba b a"), (Ids{1, 3, 2, 1, 3, 4}));
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(Bpe, MetaspaceMarksSpaces) {
  // Spaces become "_", one goes in front of the text's first stretch only
  // ("first"), and each "_" begins a piece; the decoder drops the first one.
  const std::string added = R"([{"id": 5, "content": "<s>", "special": true, "normalized": false}])";
  const auto tok = load(spec(R"({"_": 0, "a": 1, "b": 2, "_a": 3, "_b": 4})", R"(["_ a", "_ b"])",
                             R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "first", "split": true})",
                             R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "first"})", "", added));
  EXPECT_EQ(tok.encode("a  b"), (Ids{3, 0, 4}));
  EXPECT_EQ(tok.encode("a<s>a"), (Ids{3, 5, 1}));
  EXPECT_EQ(tok.decode({3, 0, 4}), "a  b");
}

TEST(Bpe, TokenBytesAreWhatEachTokenStandsFor) {
  // GPT-2's byte-level tokens: "Ġ" is the space, "Ċ" the newline; "Ã"
  // alone is the byte 0xC3, half of "é".
  const auto gpt2 = load(spec(R"({"hi": 0, "Ġhi": 1, "Ċ": 2, "Ã": 3, "<|endoftext|>": 4})", "[]",
                              R"({"type": "ByteLevel", "add_prefix_space": false})", R"({"type": "ByteLevel"})"));
  EXPECT_EQ(gpt2.token(1), "Ġhi");  // the vocabulary's spelling is kept
  EXPECT_EQ(gpt2.token_bytes(1), " hi");
  EXPECT_EQ(gpt2.token_bytes(2), "\n");
  EXPECT_EQ(gpt2.token_bytes(3), "\xC3");
  EXPECT_EQ(gpt2.token_bytes(4), "<|endoftext|>");
  // Llama 2's: "▁" is the space, also in the text's first token (the
  // decoder's Strip acts on the whole text, not on a token), "<0xE2>" a byte.
  const std::string llama2_decoder =
      R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
          {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";
  const auto llama2 = load(spec(R"({"<unk>": 0, "▁the": 1, "▁▁": 2, "<0xE2>": 3, "<0x0A>": 4})", "[]", "null",
                                llama2_decoder, R"("unk_token": "<unk>", "byte_fallback": true, )"));
  EXPECT_EQ(llama2.token_bytes(1), " the");
  EXPECT_EQ(llama2.decode({1}), "the");
  EXPECT_EQ(llama2.token_bytes(2), "  ");
  EXPECT_EQ(llama2.token_bytes(3), "\xE2");
  EXPECT_EQ(llama2.token_bytes(4), "\n");
  EXPECT_EQ(llama2.token_bytes(0), "<unk>");
  // Metaspace's decoder keeps the first token's mark here, too.
  const auto meta = load(spec(R"({"_": 0, "_a": 1})", "[]",
                              R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "first"})",
                              R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "first"})"));
  EXPECT_EQ(meta.token_bytes(1), " a");
  EXPECT_EQ(error_of([&] { meta.token_bytes(9); }), "token id 9 names no token (vocab_size 2)");
}

TEST(Bpe, InvalidUtf8NamesTheByte) {
  const auto tok = load(spec(kAbc, "[]"));
  for (const auto& [bytes, offset] : std::vector<std::pair<std::string, int>>{
           {"ab\xC0\xAF", 2},          // overlong '/'
           {"a\xED\xA0\x80", 1},       // a surrogate
           {"abc\xE2\x82", 3},         // truncated
           {"\x80", 0},                // stray continuation byte
           {"aa\xF4\x90\x80\x80", 2}}) {  // past U+10FFFF
    const std::string& text = bytes;  // clang 14's lambdas cannot capture a structured binding
    EXPECT_NE(error_of([&] { tok.encode(text); }).find("invalid UTF-8 at byte " + std::to_string(offset) + " of the line:"),
              std::string::npos)
        << offset;
  }
  // A line of its own names no other line (its caller numbers it); a text of
  // several names the line once.
  EXPECT_EQ(error_of([&] { tok.encode("ab\xff"); }), "invalid UTF-8 at byte 2 of the line: byte 0xff never occurs in UTF-8");
  EXPECT_EQ(error_of([&] { tok.encode("ab\nc\xff"); }).find("invalid UTF-8 at byte 1 of line 2 (byte 4 of the text):"), 0u);
}

TEST(Bpe, BadIdsAreNamed) {
  const auto tok = load(spec(kAbc, "[]"));
  EXPECT_NE(error_of([&] { tok.decode({0, 9}); }).find("ids[1] = 9"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.token(-1); }).find("-1"), std::string::npos);
}

TEST(Bpe, UnsupportedFieldsAreNamed) {
  const auto fails_at = [](const std::string& json, const std::string& field) {
    const std::string what = error_of([&] { load(json); });
    EXPECT_NE(what.find("tokenizer.json: " + field), std::string::npos) << field << " -> " << what;
  };
  const std::string ok = spec(kAbc, "[]");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = ok;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  fails_at(with(R"("normalizer": null)", R"("normalizer": {"type": "NFKC"})"), "normalizer.type");
  fails_at(with(R"("type": "BPE")", R"("type": "WordPiece")"), "model.type");
  fails_at(with(R"("dropout": null)", R"("dropout": 0.1)"), "model.dropout");
  fails_at(with(R"("truncation": null)", R"("truncation": {"max_length": 4})"), "truncation");
  fails_at(with(R"("pre_tokenizer": null)",
                R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"})"),
           "pre_tokenizer.pattern.Regex");
  fails_at(with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Whitespace"})"), "pre_tokenizer.type");
  fails_at(with(R"("pre_tokenizer": null)",
                R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": "_"},
                   {"type": "ByteLevel", "add_prefix_space": false}]})"),
           "pre_tokenizer.pretokenizers[0]: Metaspace");
  fails_at(with(R"("pre_tokenizer": null)",
                R"("pre_tokenizer": {"type": "Metaspace", "replacement": "_", "prepend_scheme": "twice"})"),
           "pre_tokenizer.prepend_scheme");
  fails_at(with(R"("decoder": null)", R"("decoder": {"type": "Sequence", "decoders": [{"type": "WordPiece"}]})"),
           "decoder.decoders[0].type");
  fails_at(with(R"("added_tokens": [])", R"("added_tokens": [{"id": 7, "content": "x", "lstrip": true}])"),
           "added_tokens[0].lstrip");
  fails_at(spec(kAbc, R"(["a z"])"), "model.merges[0]");
  fails_at(spec(kAbc, R"(["a b", "c a"])"), "model.merges[1]");
  fails_at(spec(R"({"a": 0, "b": 2000000000})", "[]"), "model.vocab: \"b\" has id 2000000000");
  fails_at(spec(R"({"a": 0, "b": 0})", "[]"), "model.vocab: id 0 is given to two tokens");
  // Added tokens take the vocabulary's id, else the next free one.
  fails_at(spec(kAbc, "[]", "null", "null", "", R"([{"id": 9, "content": "<s>"}])"), "added_tokens[0].id: 9");
  fails_at(spec(kAbc, "[]", "null", "null", "", R"([{"id": 7, "content": "ab"}])"), "added_tokens[0].id: 7");  // "ca" is not a token
  fails_at(R"({"model": )", "not valid JSON");
}

// A spec() with `post` as its post_processor and <s> (7), </s> (8) added.
std::string with_post(const std::string& post) {
  const std::string added = R"([{"id": 7, "content": "<s>", "special": true, "normalized": false},
                                {"id": 8, "content": "</s>", "special": true, "normalized": false}])";
  std::string s = spec(kAbc, R"(["a b"])", "null", "null", "", added);
  const std::string from = R"("post_processor": null)";
  return s.replace(s.find(from), from.size(), R"("post_processor": )" + post);
}

const char* kTemplate = R"({"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]},
                                   "</s>": {"id": "</s>", "ids": [8], "tokens": ["</s>"]}}})";

TEST(Bpe, PostProcessorTemplateAddsItsSpecialTokens) {
  const auto tok = load(with_post(kTemplate));
  EXPECT_EQ(tok.encode("abc"), (Ids{3, 2}));  // the text's own ids
  EXPECT_EQ(tok.encode_with_specials("abc"), (Ids{7, 3, 2, 8}));
  EXPECT_EQ(tok.encode_with_specials(""), (Ids{7, 8}));
  // Cut to max_length with the special tokens kept, as tokenizers truncates.
  bool cut = false;
  EXPECT_EQ(tok.encode_with_specials("abcab", 3, &cut), (Ids{7, 3, 8}));
  EXPECT_TRUE(cut);
  EXPECT_EQ(tok.encode_with_specials("abc", 4, &cut), (Ids{7, 3, 2, 8}));
  EXPECT_FALSE(cut);
  EXPECT_NE(error_of([&] { tok.encode_with_specials("abc", 2); }).find("adds 2 special tokens"), std::string::npos);
  // In a Sequence, beside ByteLevel (GPT-2's, offsets only), the same.
  const auto seq = load(with_post(std::string(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}, )") +
                                  kTemplate + "]}"));
  EXPECT_EQ(seq.encode_with_specials("abc"), (Ids{7, 3, 2, 8}));
  // ByteLevel alone, or none: no ids added.
  EXPECT_EQ(load(with_post(R"({"type": "ByteLevel", "trim_offsets": true})")).encode_with_specials("abc"), (Ids{3, 2}));
  EXPECT_EQ(load(spec(kAbc, R"(["a b"])")).encode_with_specials("abc", 1), (Ids{3}));
}

TEST(Bpe, PostProcessorErrorsAreNamed) {
  const auto fails_at = [](const std::string& post, const std::string& field) {
    const std::string what = error_of([&] { load(with_post(post)); });
    EXPECT_NE(what.find("tokenizer.json: " + field), std::string::npos) << field << " -> " << what;
  };
  fails_at(R"({"type": "RobertaProcessing", "sep": ["</s>", 8], "cls": ["<s>", 7]})", "post_processor.type");
  fails_at(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {}})",
           "post_processor.single[0]: \"<x>\" is not in");
  fails_at(R"({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "B", "type_id": 0}}], "pair": [],
              "special_tokens": {}})",
           "post_processor.single[0]");
  fails_at(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "pair": [],
              "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}})",
           "post_processor.single: has no sequence");
  fails_at(R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
              "special_tokens": {"<s>": {"id": "<s>", "ids": [99], "tokens": ["<s>"]}}})",
           "post_processor.special_tokens[\"<s>\"].ids: 99 names no token");
}

TEST(Bpe, FolderNamesBeginAndEnd) {
  const auto dir = std::filesystem::temp_directory_path() / ("qkv_bpe_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string added = R"([{"id": 7, "content": "<s>", "special": true, "normalized": false},
                                {"id": 8, "content": "</s>", "special": true, "normalized": false}])";
  std::ofstream(dir / "tokenizer.json") << spec(kAbc, "[]", "null", "null", "", added);
  EXPECT_EQ(qkv::BpeTokenizer::from_folder(dir.string()).bos_id(), -1);
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>"})";
  const auto tok = qkv::BpeTokenizer::from_folder(dir.string());
  EXPECT_EQ(tok.bos_id(), 7);
  EXPECT_EQ(tok.eos_id(), 8);
  // A name the config lacks comes from special_tokens_map.json.
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "</s>"})";
  std::ofstream(dir / "special_tokens_map.json") << R"({"bos_token": "<s>", "eos_token": "<s>"})";
  EXPECT_EQ(qkv::BpeTokenizer::from_folder(dir.string()).bos_id(), 7);
  EXPECT_EQ(qkv::BpeTokenizer::from_folder(dir.string()).eos_id(), 8);
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<nope>"})";
  EXPECT_NE(error_of([&] { qkv::BpeTokenizer::from_folder(dir.string()); }).find("eos_token"), std::string::npos);
  std::filesystem::remove_all(dir);
  EXPECT_NE(error_of([&] { qkv::BpeTokenizer::from_folder(dir.string()); }).find("cannot read"), std::string::npos);
}

}  // namespace
