// The bounds ein puts on what a user writes, so that bad input ends in a UserError rather than
// a stack overflow or an exhausted heap: how deep the parsers let text nest, how deep an
// expression tree may grow, and how much trace-time work a script may ask for. Every limit
// lives here, named; the messages that quote them are with each language's other messages.
#pragma once

#include <cstdint>

namespace ein::limits {

/// Brackets, pending prefix/right-associative operators and nested statements open at once.
/// The PEGTL grammars recurse through the whole precedence ladder at each level.
inline constexpr int kMaxNesting = 100;

/// The height of one expression tree (a chain `a + b + ... + z` is one level per operator,
/// a call or subscript one per call). The passes after the parser (printing, evaluation,
/// tracing, emission) recurse over the tree; about 2.5 KiB of stack per level, so this fits
/// the default 8 MiB stack with room for the nesting of calls around it.
inline constexpr uint32_t kMaxExprDepth = 1000;

/// Calls of `.ein` functions (and module constructions) in progress at once.
inline constexpr int kMaxCallDepth = 256;

/// Loop and comprehension iterations one trace (or the script's loading) may run, nested
/// loops and loops in called functions counted together. Loops are unrolled into the traced
/// graph, so a loop that carries a value builds a chain this long, which the fusion and the
/// emitters walk recursively (a chain of 20,000 overflows the stack today; 10,000 runs).
inline constexpr int64_t kMaxLoopIterations = 10'000;

/// Items of a list, or characters of a string, a script may build.
inline constexpr int64_t kMaxListLength = 1'000'000;

}  // namespace ein::limits
