// Flags that several `ein` subcommands take with the same meaning, registered once so that
// their names and help texts cannot drift apart: a script's file and its `--set` overrides.
// Each subcommand's own flags stay in its file.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ein::cli {

/// Registers the repeatable `--set NAME=VALUE` (or several: `B=8,T=1024`) into `sets`, read
/// later by parse_settings() (tools/script_command.h); `scope` prefixes the help text, e.g.
/// "a .ein script: " where the subcommand takes other inputs too.
void add_set_option(CLI::App& cmd, std::vector<std::string>& sets, const std::string& scope = "");
/// Registers the required positional `file` (the .ein script) and `--set`.
void add_script_options(CLI::App& cmd, std::string& file, std::vector<std::string>& sets);

}  // namespace ein::cli
