// Fuzz target: einops pattern text through the parser, the printer and sema. An input is one
// row in the form of the conformance tables, tab-separated: `op  pattern  shapes  kwargs`, e.g.
// `reduce[mean]\tb (h w) -> b h\t(2,12)\th=3`; kwargs are `name=size,...`, `ddof=N`, or
// `ps=(2,);(-1,)` for unpack. An input without a tab is a pattern alone.
// UserError is the expected outcome of a bad pattern; anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>
#include <ein/pattern_printer.h>
#include <ein/patterns.h>

#include "fuzz_support.h"

namespace ein::fuzz {
namespace {

// The op column (`rearrange`, `reduce[sum]`, `repeat_list`, ...) into `req`; false if unknown.
bool read_op(std::string_view op, ResolveRequest& req) {
  if (const size_t open = op.find('['); open != std::string_view::npos && op.back() == ']') {
    const auto r = parse_reduction(op.substr(open + 1, op.size() - open - 2));
    if (!r) return false;
    req.reduction = *r;
    op = op.substr(0, open);
  }
  if (op.ends_with("_list")) {
    req.list_input = true;
    op.remove_suffix(5);
  }
  const auto pop = parse_pattern_op(op);
  if (!pop) return false;
  req.op = *pop;
  return true;
}

// The kwargs column into `req`; false if it cannot be read.
bool read_kwargs(std::string_view kwargs, ResolveRequest& req) {
  kwargs = trim(kwargs);
  if (kwargs.empty() || kwargs == "-") return true;
  if (kwargs.starts_with("ps=")) {
    auto ps = tuples(kwargs.substr(3), /*min=*/-1);
    if (!ps) return false;
    req.packed = std::move(*ps);
    return true;
  }
  const std::vector<std::string_view> items = split(kwargs, ',');
  if (items.size() > kMaxItems) return false;
  for (std::string_view item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view name = trim(item.substr(0, eq));
    if (name == "ddof") {
      req.ddof = integer(item.substr(eq + 1), INT64_MIN);
      if (!req.ddof) return false;
    } else if (name == "dtype") {
      const auto d = parse_dtype_name(trim(item.substr(eq + 1)));
      if (!d) return false;
      req.dtype = *d;
    } else {
      const auto size = integer(item.substr(eq + 1));
      if (!size) return false;
      req.sizes.push_back({std::string(name), *size});
    }
  }
  return true;
}

void fuzz_one(std::string_view input) {
  const std::vector<std::string_view> fields = split(input, '\t');
  const std::string_view text = fields.size() == 1 ? fields[0] : fields[1];
  Pattern pattern;
  try {
    pattern = parse_pattern(text);
  } catch (const UserError&) {
    return;
  }
  check_round_trip(
      text, [](std::string_view t) { return parse_pattern(t); },
      [](const Pattern& p) { return print(p); });
  try {
    parse_expression(pattern);
  } catch (const UserError&) {
  }
  if (fields.size() < 3) return;
  ResolveRequest req;
  auto shapes = tuples(fields[2]);
  if (!read_op(fields[0], req) || !shapes || (fields.size() > 3 && !read_kwargs(fields[3], req)))
    return;
  req.shapes = std::move(*shapes);
  try {
    const Recipe recipe = resolve_pattern(pattern, req);
    format_result(recipe);
    explain(recipe);
  } catch (const UserError&) {
  }
}

}  // namespace
}  // namespace ein::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ein::fuzz::fuzz_one({reinterpret_cast<const char*>(data), size});
  return 0;
}
