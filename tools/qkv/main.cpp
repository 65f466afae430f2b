// qkv: the command-line program. One file per command (cmd_*.cpp); this file
// only parses, dispatches and turns errors into exit codes.
#include <cstdio>
#include <map>

#include "cli_common.h"
#include "commands.h"
#include "qkv/error.h"

namespace {

// A message as one printable line: control bytes and bytes that are not
// valid UTF-8 (from a file's header, a path, an option value) become \xNN,
// so an error never writes raw binary to the terminal. Valid UTF-8 (a path
// with accents) is kept as it is.
std::string printable(const std::string& s) {
  std::string out;
  auto escape = [&](unsigned char c) {
    const char* hex = "0123456789abcdef";
    out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
    if (ok && len == 2) ok = c >= 0xc2;
    if (ok && len == 3) {
      const unsigned char d = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xe0 && d < 0xa0) && !(c == 0xed && d >= 0xa0);
    }
    if (ok && len == 4) {
      const unsigned char d = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xf4 && !(c == 0xf0 && d < 0x90) && !(c == 0xf4 && d >= 0x90);
    }
    if (!ok || (len == 1 && (c < 0x20 || c == 0x7f))) {
      escape(c);
      ++i;
      continue;
    }
    out.append(s, i, len);
    i += len;
  }
  return out;
}

// What the command printed must all have reached stdout: a full disk or a
// closed pipe is an error (exit 1), never a truncated output and exit 0. A
// command that failed already has said why; its code stands.
int finish(const std::string& cmd, int code) {
  const std::string failed = qkv::cli::flush_stdout();
  if (failed.empty() || code != 0) return code;
  qkv::cli::report_error(cmd + ": error: " + failed);
  return qkv::cli::kExitData;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qkv::cli;
  CLI::App app{
      "qkv: exact self-attention, softmax(Q Kᵀ / √d_k) V, for learners and engineers.\n"
      "Start with `qkv demo`, then `qkv explain --tokens \"the cat sat down\"`."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qkv 0.1.0");
  std::map<CLI::App*, Runner> runners;
  for (auto add : {add_demo, add_attention, add_explain, add_bench, add_train, add_sample, add_logits, add_size,
                   add_import, add_export, add_tokenize, add_embed, add_quantize}) {
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
    report_error("qkv: error: unknown command '" + printable(argv[1]) + "': expected one of " + names +
                 " (see 'qkv --help')");
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
    report_error(cmd + ": error: " + printable(e.what()) + " (see '" + cmd + " --help')");
    return kExitUsage;
  }
  CLI::App* sub = app.get_subcommands().front();
  const std::string cmd = "qkv " + sub->get_name();
  int code = 0;
  try {
    // Every command's outputs, checked here once against its inputs and
    // each other, before it reads or writes anything.
    check_path_options(*sub);
    code = runners.at(sub)();
  } catch (const UsageError& e) {
    report_error(cmd + ": error: " + printable(e.what()) + " (see '" + cmd + " --help')");
    code = kExitUsage;
  } catch (const qkv::Error& e) {
    report_error(cmd + ": error: " + printable(e.what()));
    code = kExitData;
  } catch (const std::bad_alloc&) {
    report_error(cmd + ": error: out of memory");
    code = kExitData;
  }
  return finish(cmd, code);
}
