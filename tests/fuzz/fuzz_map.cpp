// Fuzz target: map expressions (`x[b s d], w[d] -> x * w`) through the parser, the printer, the
// checks and the lowering to a scalar DAG (map_program), then the binding of input shapes. An
// input is the expression on its first line and, optionally, one shape per input on the
// second: `(2,3,4);(4,)`. UserError is the expected outcome of a bad expression or shapes;
// anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include <ein/diagnostic.h>

#include "compiler/graph/map_program.h"
#include "dsl/map_parser.h"
#include "dsl/map_printer.h"
#include "fuzz_support.h"

namespace ein::fuzz {
namespace {

void fuzz_one(std::string_view input) {
  const size_t newline = input.find('\n');
  const std::string_view text = input.substr(0, newline);
  try {
    parse_map(text);
  } catch (const UserError&) {
    return;
  }
  check_round_trip(
      text, [](std::string_view t) { return parse_map(t); },
      [](const MapExpr& m) { return print(m); });
  std::shared_ptr<const MapProgram> program;
  try {
    program = map_program(text);
  } catch (const UserError&) {
    return;
  }
  if (newline == std::string_view::npos) return;
  const auto shapes = tuples(input.substr(newline + 1));
  if (!shapes) return;
  try {
    bind_map_sizes(*program, *shapes);
  } catch (const UserError&) {
  }
}

}  // namespace
}  // namespace ein::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ein::fuzz::fuzz_one({reinterpret_cast<const char*>(data), size});
  return 0;
}
