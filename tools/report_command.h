// `ein report FILE.ein`: the static accounting of one training step of a script — FLOPs,
// bytes and saved activations per source expression and module, the parameter census, FLOPs
// under several conventions, the memory ledger and training time — as text, markdown, JSON or
// one self-contained HTML page with SVG charts. The numbers are tools/report.h's.
#pragma once

#include <CLI/CLI.hpp>

namespace ein::cli {

/// Registers the `report` subcommand on `app`; the callback sets `exit_code`
/// (0 ok, 1 a diagnostic about the script or a flag's value).
void add_report_command(CLI::App& app, int& exit_code);

}  // namespace ein::cli
