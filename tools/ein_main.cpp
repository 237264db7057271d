// The `ein` command-line tool: one subcommand per task. Subcommands register themselves
// from their own files; this file only dispatches and maps failures to exit codes
// (0 ok, 1 a diagnostic about the user's input, 2 a usage error).
#include <CLI/CLI.hpp>
#include <ein/trainer.h>

#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "tools/cli_errors.h"
#include "tools/emit_command.h"
#include "tools/estimate_command.h"
#include "tools/report_command.h"
#include "tools/script_command.h"
#include "tools/shape_command.h"

int main(int argc, char** argv) {
  // `ein train`: SIGINT/SIGTERM are blocked before anything can start a thread, so only the
  // Trainer's watcher ever takes them (api/stop_signals.h); a signal that comes before training
  // starts waits for it and stops the run before its first step.
  if (argc > 1 && std::string_view(argv[1]) == "train") ein::block_stop_signals();
  CLI::App app{"ein: einops-style tensor patterns, checked statically, compiled to kernels"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ein 0.1.0"));
  int exit_code = 0;
  ein::cli::add_shape_command(app, exit_code);
  ein::cli::add_estimate_command(app, exit_code);
  ein::cli::add_report_command(app, exit_code);
  ein::cli::add_emit_command(app, exit_code);
  ein::cli::add_script_commands(app, exit_code);
  ein::cli::add_train_command(app, exit_code);
  ein::cli::add_quantize_command(app, exit_code);
  ein::cli::add_sample_command(app, exit_code);
  // CLI11 reads "-> a" as an unknown short option '>'; a pattern may start with "->" (a
  // scalar input), so such arguments are marked here and unmarked by the subcommands.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args)
    if (a.rfind("->", 0) == 0) a.insert(0, 1, ein::cli::kProtectedArgument);
  std::vector<char*> pointers;
  for (std::string& a : args)
    pointers.push_back(a.data());
  try {
    app.parse(argc, pointers.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // usage errors: say so in the diagnostics' style
    return ein::cli::print_usage_error({}, e.what());
  } catch (
      const std::exception& e) {  // an internal failure: say so, never a raw library text alone
    std::cerr << "ein: internal error (please report): " << e.what() << '\n';
    return 3;
  }
  return exit_code;
}
