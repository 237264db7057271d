// `ein emit`: shows what the compiler makes of a standard function, a map expression or a
// reduce pattern at one stage of the pipeline: the Graph IR, the fused kernels (with the nodes
// each holds and why the others are left as is), or the MLIR of each kernel.
#pragma once

#include <CLI/CLI.hpp>

namespace ein::cli {

/// Registers the `emit` subcommand on `app`; the callback sets `exit_code` (0 ok, 1 a
/// diagnostic about the input, 2 a usage error).
void add_emit_command(CLI::App& app, int& exit_code);

}  // namespace ein::cli
