// How the `ein` subcommands report failures, in one place: a usage mistake exits 2 with a
// pointer to --help, a diagnostic about the user's input or a runtime failure exits 1. It does
// not decide what is a mistake; the subcommands throw, these helpers print.
#pragma once

#include <stdexcept>
#include <string_view>

namespace ein::cli {

/// A usage mistake: flags that do not go together, a missing companion flag, an unknown stage
/// or target (exit 2). A bad value in a flag is an ein::RuntimeError instead (exit 1).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;  ///< the message, without "error: "
};

/// Prints "error: MESSAGE\nRun 'ein COMMAND --help' for usage." to stderr (with no command:
/// "Run 'ein --help' or 'ein SUBCOMMAND --help' for usage.") and returns 2.
int print_usage_error(std::string_view command, std::string_view message);

/// Inside a catch block: prints a UsageError as print_usage_error() does for `command` and
/// returns 2; prints a UserError (its rendered diagnostic) or a RuntimeError ("error: ...")
/// and returns 1; rethrows anything else (an internal error, which ein's main reports as such).
int report_error(std::string_view command = {});

}  // namespace ein::cli
