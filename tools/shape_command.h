// `ein shape`: resolves one einops pattern against shapes and prints the result shape, or
// the diagnostic. The static counterpart of calling einops, for scripts and for people.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ein::cli {

/// Marks an argument that starts with "->" so CLI11 does not take it for an option.
inline constexpr char kProtectedArgument = '\x1f';
/// Removes the mark, if any.
inline std::string unprotect(std::string arg) {
  if (!arg.empty() && arg[0] == kProtectedArgument) arg.erase(0, 1);
  return arg;
}

/// Registers the `shape` subcommand on `app`; the callback sets `exit_code`.
void add_shape_command(CLI::App& app, int& exit_code);

}  // namespace ein::cli
