// Structural comparison of pattern ASTs (ranges ignored), used by round-trip tests.
#include <ein/pattern_ast.h>

#include <algorithm>

namespace ein {
namespace {

bool same_token(const AxisToken& a, const AxisToken& b) {
  return a.kind == b.kind && a.name == b.name && a.value == b.value;
}

bool same_term(const AxisTerm& a, const AxisTerm& b) {
  return a.is_group == b.is_group &&
         std::equal(a.tokens.begin(), a.tokens.end(), b.tokens.begin(), b.tokens.end(), same_token);
}

}  // namespace

bool same_structure(const PatternSide& a, const PatternSide& b) {
  return std::equal(a.terms.begin(), a.terms.end(), b.terms.begin(), b.terms.end(), same_term);
}

bool same_structure(const Pattern& a, const Pattern& b) {
  const auto same_side = [](const PatternSide& x, const PatternSide& y) {
    return same_structure(x, y);
  };
  if (!std::equal(a.inputs.begin(), a.inputs.end(), b.inputs.begin(), b.inputs.end(), same_side))
    return false;
  if (a.output.has_value() != b.output.has_value()) return false;
  return !a.output || same_structure(*a.output, *b.output);
}

}  // namespace ein
