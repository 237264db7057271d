// Fuzz target: a `.ein` script through what `ein check FILE` does: parse (with its imports,
// which resolve in the script's folder, then stdlib/), bind dims and lets, build the train
// block's members without allocating, and trace every function for its annotated sizes. The
// input is the script's text. UserError (a mistake in the script) and RuntimeError (a tensor
// rule broken at trace time) are the outcomes `ein check` reports; anything else escaping
// (which would end `ein check` with std::terminate) is a finding.
//
// Loops may run 16 iterations per trace (LoadOptions::max_loop_iterations), not 10,000: a
// layer count is a loop, and mutations that turn `dim L = 2` into 344 layers made a few
// hundred inputs of the corpus take seconds each under the sanitizers, most of the fuzzer's
// time, for the code a 2-layer model covers already. Every example's loops fit but
// llama_7b's 32 layers, which now ends at its comprehension (the limit's error path).
#include <cstddef>
#include <cstdint>
#include <string>

#include <ein/diagnostic.h>
#include <ein/errors.h>

#include "fuzz_support.h"
#include "script/script.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ein::fuzz::scratch_file("main.ein", data, size);
  ein::script::LoadOptions options;
  options.allocate = false;  // `ein check`: shapes only, nothing runs
  options.stdlib = {EIN_STDLIB_DIR};
  options.max_loop_iterations = 16;
  try {
    auto program = ein::script::Program::load(path, options);
    program->check_all();
    program->parameter_info();
    program->dims();
    program->optimizer_info();
  } catch (const ein::UserError&) {
  } catch (const ein::RuntimeError&) {
  }
  return 0;
}
