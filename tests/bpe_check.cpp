// Runs qkv::BpeTokenizer from outside, for tests/numpy/test_bpe.py, which
// compares it with Hugging Face's tokenizers. Built with the tests, not
// installed.
//
//   bpe_check TOKENIZER_JSON TEXTS_JSON
//     TEXTS_JSON is a JSON array of strings; prints one JSON object:
//     {"ids": [[...] per text], "decoded": [decode(ids) per text],
//      "with_specials": [encode_with_specials(text) per text]}.
//   bpe_check --speed TOKENIZER_JSON TEXT_FILE
//     encodes the whole file a few times; prints MB/s of the fastest run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "qkv/bpe.h"
#include "qkv/error.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw qkv::Error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int speed(const qkv::BpeTokenizer& tok, const std::string& text) {
  double best = 1e30;
  size_t n = 0;
  for (int run = 0; run < 3; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    n = tok.encode(text).size();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("%zu bytes, %zu tokens, %.2f MB/s\n", text.size(), n, text.size() / best / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool timing = argc == 4 && std::string(argv[1]) == "--speed";
    if (argc != 3 && !timing) {
      std::fprintf(stderr, "usage: bpe_check TOKENIZER_JSON TEXTS_JSON | --speed TOKENIZER_JSON TEXT_FILE\n");
      return 2;
    }
    const std::string tok_path = argv[timing ? 2 : 1];
    const qkv::BpeTokenizer tok = qkv::BpeTokenizer::from_json(read_file(tok_path), tok_path);
    if (timing) return speed(tok, read_file(argv[3]));
    const nlohmann::json texts = nlohmann::json::parse(read_file(argv[2]));
    nlohmann::json out = {{"ids", nlohmann::json::array()},
                          {"decoded", nlohmann::json::array()},
                          {"with_specials", nlohmann::json::array()}};
    for (const auto& t : texts) {
      const std::vector<int32_t> ids = tok.encode(t.get<std::string>());
      out["ids"].push_back(ids);
      out["decoded"].push_back(tok.decode(ids));
      out["with_specials"].push_back(tok.encode_with_specials(t.get<std::string>()));
    }
    std::puts(out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bpe_check: %s\n", e.what());
    return 1;
  }
}
