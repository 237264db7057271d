// Test helpers: resolve a pattern in one call, and capture the UserError it throws.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include <ein/patterns.h>
#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>

namespace ein::testing {

/// Builds a request for `op`; `adjust` may set reduction, ddof, dtype, packed shapes.
inline ResolveRequest request(PatternOp op, std::vector<Shape> shapes,
                              std::vector<AxisSize> sizes = {},
                              const std::function<void(ResolveRequest&)>& adjust = {}) {
  ResolveRequest r;
  r.op = op;
  r.shapes = std::move(shapes);
  r.sizes = std::move(sizes);
  if (adjust) adjust(r);
  return r;
}

/// Parses and resolves.
inline Recipe resolve(const std::string& pattern, const ResolveRequest& r) {
  return resolve_pattern(parse_pattern(pattern), r);
}

/// The UserError that parsing or resolving throws; nullopt (and a test failure) if none.
inline std::optional<UserError> error_of(const std::string& pattern, const ResolveRequest& r) {
  try {
    const Recipe recipe = resolve(pattern, r);
    ADD_FAILURE() << "'" << pattern << "' resolved to " << format_result(recipe)
                  << ", expected an error";
  } catch (const UserError& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace ein::testing
