// The `ein` command-line tool: one subcommand per task. Subcommands register themselves
// from their own files; this file only dispatches and maps failures to exit codes
// (0 ok, 1 a diagnostic about the user's input, 2 a usage error).
#include <CLI/CLI.hpp>

#include <iostream>

#include "tools/shape_command.h"

int main(int argc, char** argv) {
  CLI::App app{"ein: einops-style tensor patterns, checked statically, compiled to kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ein 0.1.0"));
  int exit_code = 0;
  ein::cli::add_shape_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const std::exception& e) {  // an internal failure: say so, never a raw library text alone
    std::cerr << "ein: internal error (please report): " << e.what() << '\n';
    return 3;
  }
  return exit_code;
}
