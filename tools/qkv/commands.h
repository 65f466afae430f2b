// commands.h: each command adds its subcommand to the app and returns the
// function that runs it once parsing succeeded.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace qkv::cli {

using Runner = std::function<int()>;

Runner add_demo(CLI::App& app);
Runner add_attention(CLI::App& app);
Runner add_explain(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_sample(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_size(CLI::App& app);
Runner add_import(CLI::App& app);
Runner add_export(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_embed(CLI::App& app);
Runner add_quantize(CLI::App& app);

}  // namespace qkv::cli
