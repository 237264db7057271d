// `ein estimate`: napkin math from a handful of numbers, without a script: training FLOPs
// and days (6·N·D), bytes per parameter and the largest model that fits, ZeRO per-device
// memory, and transformer activation memory. The arithmetic is tools/estimate.h's.
#pragma once

#include <CLI/CLI.hpp>

namespace ein::cli {

/// Registers the `estimate` subcommand on `app`; the callback sets `exit_code`
/// (0 ok, 1 a bad input value, 2 a usage error such as a missing companion flag).
void add_estimate_command(CLI::App& app, int& exit_code);

}  // namespace ein::cli
