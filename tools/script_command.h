// `.ein` script subcommands: `ein check FILE`, `ein run FILE` (script_command.cpp) and
// `ein train FILE` (train_command.cpp), `ein quantize` and `ein sample`.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "script/script.h"
#include "tools/cli_errors.h"  // report_error(), which `train` uses too

namespace ein::cli {

/// Registers `check` and `run`; callbacks set `exit_code` (0 ok, 1 a diagnostic).
void add_script_commands(CLI::App& app, int& exit_code);
/// Registers `train`.
void add_train_command(CLI::App& app, int& exit_code);
/// Registers `quantize` (tools/quantize_command.cpp).
void add_quantize_command(CLI::App& app, int& exit_code);
/// Registers `sample` (tools/sample_command.cpp).
void add_sample_command(CLI::App& app, int& exit_code);
/// `--set NAME=VALUE` arguments, each possibly several joined by commas (`B=8,T=1024`);
/// UserError for one without '='. A value with an SI suffix (`T=8k`) is spelled out by
/// tools/cli_numbers.h's rule; the script reads every value as a plain number.
std::vector<script::Setting> parse_settings(const std::vector<std::string>& sets);

}  // namespace ein::cli
