// qkv: the command-line program. One file per command (cmd_*.cpp); this file
// only parses, dispatches and turns errors into exit codes.
#include <cstdio>
#include <iostream>
#include <map>

#include "cli_common.h"
#include "commands.h"
#include "qkv/error.h"

int main(int argc, char** argv) {
  using namespace qkv::cli;
  CLI::App app{
      "qkv: exact self-attention, softmax(Q Kᵀ / √d_k) V, for learners and engineers.\n"
      "Start with `qkv demo`, then `qkv explain --tokens \"the cat sat down\"`."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qkv 0.1.0");
  std::map<CLI::App*, Runner> runners;
  for (auto add : {add_demo, add_attention, add_explain, add_bench, add_train, add_sample, add_logits, add_size}) {
    Runner run = add(app);
    runners[app.get_subcommands({}).back()] = run;
  }
  // CLI11 would only say "A subcommand is required"; name what was typed.
  auto known = [&](const std::string& name) {
    for (const auto& [sub, run] : runners)
      if (sub->get_name() == name) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::string names;
    for (CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
    std::cerr << "qkv: error: unknown command '" << argv[1] << "': expected one of " << names
              << " (see 'qkv --help')\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const auto subs = app.get_subcommands();
    const std::string cmd = subs.empty() ? "qkv" : "qkv " + subs.front()->get_name();
    std::cerr << cmd << ": error: " << e.what() << " (see '" << cmd << " --help')\n";
    return kExitUsage;
  }
  CLI::App* sub = app.get_subcommands().front();
  const std::string cmd = "qkv " + sub->get_name();
  try {
    return runners.at(sub)();
  } catch (const UsageError& e) {
    std::cerr << cmd << ": error: " << e.what() << " (see '" << cmd << " --help')\n";
    return kExitUsage;
  } catch (const qkv::Error& e) {
    std::cerr << cmd << ": error: " << e.what() << "\n";
    return kExitData;
  } catch (const std::bad_alloc&) {
    std::cerr << cmd << ": error: out of memory\n";
    return kExitData;
  }
}
