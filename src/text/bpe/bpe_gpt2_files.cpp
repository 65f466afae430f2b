// bpe_gpt2_files.cpp: a GPT-2 folder without tokenizer.json, read from its
// vocab.json and merges.txt (the files GPT-2's original tokenizer used) by
// writing the tokenizer.json they stand for.
#include <filesystem>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/json_strict.h"
#include "text/bpe/bpe_impl.h"
#include "qkv/error.h"

namespace qkv::bpe {
namespace {

using nlohmann::json;

json read_json_file(const std::filesystem::path& path) {
  try {
    return parse_json_strict(read_file(path.string()), 64);
  } catch (const Error& e) {
    throw Error("'" + path.string() + "': " + e.what());
  }
}

}  // namespace

std::string gpt2_files_json(const std::string& dir) {
  const std::filesystem::path root(dir), vocab_path = root / "vocab.json", merges_path = root / "merges.txt";
  const json vocab = read_json_file(vocab_path);
  if (!vocab.is_object()) throw Error("'" + vocab_path.string() + "': expected an object of tokens to ids");
  // merges.txt: an optional "#version" line, then one "left right" pair per line.
  json merges = json::array();
  std::istringstream lines(read_file(merges_path.string()));
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(line);  // the tokenizer.json reader checks each pair, naming its index
  }
  // The special tokens the config files name, as transformers adds them.
  json added = json::array();
  auto add = [&](const std::string& name) {
    if (!vocab.contains(name)) return;
    for (const json& a : added)
      if (a["content"] == name) return;
    added.push_back({{"id", vocab[name]}, {"content", name}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", true}, {"special", true}});
  };
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::filesystem::path path = root / file;
    if (!std::filesystem::exists(path)) continue;
    const json config = read_json_file(path);
    for (const char* key : {"bos_token", "eos_token", "unk_token"}) {
      if (!config.is_object() || !config.contains(key)) continue;
      const json& v = config[key].is_object() && config[key].contains("content") ? config[key]["content"] : config[key];
      if (v.is_string()) add(v.get<std::string>());
    }
  }
  if (added.empty()) add("<|endoftext|>");
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", true}};
  const json spec = {{"version", "1.0"},
                     {"added_tokens", added},
                     {"pre_tokenizer", byte_level},
                     {"post_processor", byte_level},
                     {"decoder", byte_level},
                     {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return spec.dump();
}

}  // namespace qkv::bpe
