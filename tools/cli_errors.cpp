// The `ein` subcommands' failure printing (tools/cli_errors.h): the two lines of a usage error
// and the exit codes by blame. Messages themselves are written where the mistake is found.
#include "tools/cli_errors.h"

#include <fmt/format.h>

#include <iostream>

#include <ein/diagnostic.h>
#include <ein/errors.h>

namespace ein::cli {

int print_usage_error(std::string_view command, std::string_view message) {
  if (command.empty())
    std::cerr << fmt::format("error: {}\nRun 'ein --help' or 'ein SUBCOMMAND --help' for usage.\n",
                             message);
  else
    std::cerr << fmt::format("error: {}\nRun 'ein {} --help' for usage.\n", message, command);
  return 2;
}

int report_error(std::string_view command) {
  try {
    throw;
  } catch (const UsageError& e) {
    return print_usage_error(command, e.what());
  } catch (const UserError& e) {
    std::cerr << e.what() << '\n';
    return 1;
  } catch (const RuntimeError& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace ein::cli
