// Fuzz target: jaxtyping-style shape specs through the parser, the printer and the checker.
// An input is one tensor per line, `spec` or `spec<TAB>(4,3):f32`, like one call of a jaxtyped
// function: every spec is parsed and printed back; the tensors with a shape are checked in
// order against one memo (check_shapes), then every spec's shape is resolved from that memo.
// UserError is the expected outcome of a bad spec or a mismatch; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include <ein/diagnostic.h>
#include <ein/shape_check.h>
#include <ein/shape_spec_parser.h>
#include <ein/shape_spec_printer.h>

#include "fuzz_support.h"

namespace ein::fuzz {
namespace {

struct Line {
  ShapeSpec spec;
  std::optional<std::vector<int64_t>> shape;
  DType dtype = DType::f32;
};

void fuzz_one(std::string_view input) {
  std::vector<std::string_view> texts = split(input, '\n');
  if (texts.size() > kMaxItems) return;
  std::vector<Line> lines;
  for (std::string_view text : texts) {
    const std::vector<std::string_view> fields = split(text, '\t');
    Line line;
    try {
      line.spec = parse_shape_spec(fields[0]);
    } catch (const UserError&) {
      continue;
    }
    check_round_trip(
        fields[0], [](std::string_view t) { return parse_shape_spec(t); },
        [](const ShapeSpec& s) { return print(s); });
    if (fields.size() > 1) {  // `(4,3):f32`
      const std::string_view arg = fields[1];
      const size_t colon = arg.rfind(':');
      line.shape = tuple(arg.substr(0, colon));
      if (colon != std::string_view::npos)
        line.dtype = parse_dtype_name(trim(arg.substr(colon + 1))).value_or(DType::f32);
    }
    lines.push_back(std::move(line));
  }
  std::vector<TensorCheck> checks;
  for (const Line& l : lines)
    if (l.shape) checks.push_back({"tensor", &l.spec, l.dtype, *l.shape});
  DimMemo memo;
  try {
    check_shapes(checks, memo);
  } catch (const UserError&) {
  }
  memo.to_string();
  for (const Line& l : lines) {
    try {
      resolve_shape(l.spec, memo);
    } catch (const UserError&) {
    }
  }
}

}  // namespace
}  // namespace ein::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ein::fuzz::fuzz_one({reinterpret_cast<const char*>(data), size});
  return 0;
}
