// `.ein` script subcommands: `ein check FILE`, `ein run FILE` (script_command.cpp) and
// `ein train FILE` (train_command.cpp).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "script/script.h"

namespace ein::cli {

/// Registers `check` and `run`; callbacks set `exit_code` (0 ok, 1 a diagnostic).
void add_script_commands(CLI::App& app, int& exit_code);
/// Registers `train`.
void add_train_command(CLI::App& app, int& exit_code);
/// Inside a catch block: prints a UserError (its rendered diagnostic) or a RuntimeError
/// ("error: ...") to stderr and returns exit code 1; rethrows anything else (an internal
/// error, which ein's main reports as such).
int report_error();
/// `--set NAME=VALUE` arguments, each possibly several joined by commas (`B=8,T=1024`);
/// UserError for one without '='.
std::vector<script::Setting> parse_settings(const std::vector<std::string>& sets);

}  // namespace ein::cli
