// Shared flag registrations of the `ein` subcommands (tools/cli_options.h). Only the
// registration lives here; reading the values is the subcommands' (and parse_settings()'s).
#include "tools/cli_options.h"

namespace ein::cli {

void add_set_option(CLI::App& cmd, std::vector<std::string>& sets, const std::string& scope) {
  cmd.add_option("--set", sets,
                 scope + "override a dim or let: NAME=VALUE, or several: B=8,T=1024 (repeatable; "
                         "8k = 8000)");
}

void add_script_options(CLI::App& cmd, std::string& file, std::vector<std::string>& sets) {
  cmd.add_option("file", file, "the .ein script")->required();
  add_set_option(cmd, sets);
}

}  // namespace ein::cli
