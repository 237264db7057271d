// The typed AST of einops patterns: "b s (h d) -> b h s d", "b i d, b j d -> b i j",
// "i j * k" (pack), "batch _ h w" (parse_shape). The parser builds it without semantic
// checks; sema (compiler/pattern_sema) gives it meaning. Every node carries a SourceRange.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ein/source.h>

namespace ein {

/// One axis token: a name, a number, `...` or pack's `*`.
struct AxisToken {
  enum class Kind : uint8_t {
    named,     ///< `b`, `head_dim`
    number,    ///< `1` (unit) or `3` (an anonymous axis of length 3, distinct from every other)
    ellipsis,  ///< `...` (or the single character `…`)
    star,      ///< `*` in pack/unpack patterns
  };
  Kind kind = Kind::named;
  std::string name;   ///< the identifier, for named axes
  int64_t value = 0;  ///< the number, for number axes
  SourceRange range;  ///< the token in the pattern text

  /// True for `1`: a unit axis, same as `()`.
  bool is_unit() const { return kind == Kind::number && value == 1; }
};

/// One top-level item of a side: a lone token `b`, or a composition `(h d)` / `()`.
struct AxisTerm {
  bool is_group = false;          ///< written with parentheses
  std::vector<AxisToken> tokens;  ///< one token when !is_group; any number in a group
  SourceRange range;              ///< the token, or the group with its parentheses
};

/// One side of a pattern: the terms describing one tensor's dimensions, in order.
struct PatternSide {
  std::vector<AxisTerm> terms;  ///< one term per tensor dimension (before ellipsis expansion)
  SourceRange range;            ///< from the first to the last term (a point when empty)
};

/// A whole pattern: comma-separated inputs, and an output after `->` when there is one.
struct Pattern {
  SourcePtr source;                   ///< the text, for diagnostics
  std::vector<PatternSide> inputs;    ///< at least one
  std::optional<PatternSide> output;  ///< absent for pack/unpack/parse_shape patterns
  SourceRange arrow;                  ///< the `->`, when present
};

/// Structural equality, ignoring source ranges (what parse → print → parse must keep).
bool same_structure(const Pattern& a, const Pattern& b);
/// Structural equality of one side, ignoring source ranges.
bool same_structure(const PatternSide& a, const PatternSide& b);

}  // namespace ein
