// `ein shape`: resolves one einops pattern against shapes and prints the result shape, or
// the diagnostic. The static counterpart of calling einops, for scripts and for people.
#pragma once

#include <CLI/CLI.hpp>

namespace ein::cli {

/// Registers the `shape` subcommand on `app`; the callback sets `exit_code`.
void add_shape_command(CLI::App& app, int& exit_code);

}  // namespace ein::cli
