// fuzz_cli.cpp: libFuzzer target for the qkv command line: arbitrary
// arguments through CLI11 and every command's own option checks (thread
// bounds, integer ranges, --window, --key-lengths, --scale, --softcap, the
// memory estimates from sizes), exactly as tools/qkv/main.cpp builds them.
//
// Input: the arguments after "qkv", separated by NUL bytes. After parsing,
// the runners of attention, train and sample run too, because they check
// their option values before touching any file; they run in an empty
// temporary directory and arguments holding '/' are skipped, so every file
// they name is missing and nothing is ever read or written. demo, explain
// and bench are parsed only (their runners do real work). Anything other
// than success, a CLI11 parse error, UsageError or qkv::Error is a bug.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"
#include "qkv/error.h"

namespace {

constexpr size_t kMaxArgs = 32, kMaxArgLen = 256;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char tmpl[] = "/tmp/qkv-fuzz-cli.XXXXXX";
  if (!mkdtemp(tmpl) || chdir(tmpl) != 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qkv::cli;
  std::vector<std::string> args{"qkv"};
  std::string arg;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == 0) {
      args.push_back(arg);
      arg.clear();
    } else {
      arg += static_cast<char>(data[i]);
    }
  }
  if (args.size() > kMaxArgs + 1) return 0;
  for (const std::string& a : args)
    if (a.size() > kMaxArgLen || a.find('/') != std::string::npos) return 0;

  CLI::App app{"qkv"};
  app.require_subcommand(1);
  std::map<CLI::App*, Runner> runners;
  for (auto add : {add_demo, add_attention, add_explain, add_bench, add_train, add_sample}) {
    Runner run = add(app);
    runners[app.get_subcommands({}).back()] = run;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;
  }
  CLI::App* sub = app.get_subcommands().front();
  const std::string name = sub->get_name();
  if (name != "attention" && name != "train" && name != "sample") return 0;
  try {
    runners.at(sub)();
  } catch (const UsageError&) {
  } catch (const qkv::Error&) {
  }
  return 0;
}
