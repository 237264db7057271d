// Every user-facing message of the shape-spec parser, in one place so they can be reviewed
// together. Grammar messages are completed by the parser as "unexpected 'c': <message>";
// messages with `{}` are fmt format strings. The checker's messages live in shape_check.cpp.
#pragma once

namespace ein::detail::spec_msg {

// --- Grammar: raised by must<> at the offending character ------------------------------

/// How a grammar error reads: "<what was found>: <what the rule expected>".
inline constexpr const char* kGrammarError = "{}: {}";
/// Found: the end of the text.
inline constexpr const char* kUnexpectedEnd = "unexpected end of the spec";
/// Found: a blank.
inline constexpr const char* kUnexpectedSpace = "unexpected whitespace";
/// Found: a character; {} is the character.
inline constexpr const char* kUnexpectedChar = "unexpected '{}'";

/// A comma where a space should separate two dims (jaxtyping's "Axes should be separated with
/// spaces, not commas").
inline constexpr const char* kCommaBetweenDims =
    "axes are separated by spaces, not commas (write 'a b', not 'a, b')";
/// `foo#`: the broadcast marker after the name.
inline constexpr const char* kTrailingHash =
    "'#' goes first: write '#foo' to make a dim broadcastable, not 'foo#'";
/// A character glued to the end of a dim.
inline constexpr const char* kExpectedSpace = "expected a space before the next dim";
/// Inside `dtype[...]`, neither a dim nor the closing bracket.
inline constexpr const char* kExpectedDimOrClose = "expected a dim or ']' to close the spec";
/// Text after the closing `]`.
inline constexpr const char* kTextAfterClose = "nothing may follow the closing ']'";
/// A bare dims string with something that cannot start a dim.
inline constexpr const char* kExpectedDim = "expected a dim";
/// An operator with nothing usable after it.
inline constexpr const char* kExpectedOperand =
    "expected a name, an integer or '(' after the operator (a symbolic dim has no spaces "
    "outside parentheses)";
/// `(` with no expression inside.
inline constexpr const char* kExpectedParenBody = "expected a size expression after '('";
/// A parenthesised expression that is not closed.
inline constexpr const char* kExpectedParenClose = "expected ')' to close the '('";
/// `min(` with no argument.
inline constexpr const char* kExpectedArgument = "expected a function argument";
/// A call that is not closed.
inline constexpr const char* kExpectedCallClose = "expected ',' or ')' in the function call";
/// A single slash.
inline constexpr const char* kSlash =
    "sizes use '//' (floor division); '/' would not give an integer";

// --- Dim classification: jaxtyping's AnnotationError/ValueError cases -------------------

/// `##a`.
inline constexpr const char* kTwoHashes =
    "'#' used twice: one '#' makes a dim broadcastable ('##foo' is not allowed)";
/// `**a`.
inline constexpr const char* kTwoStars =
    "'*' used twice: one '*' makes a dim variadic ('**foo' is not allowed)";
/// `__a`.
inline constexpr const char* kTwoUnderscores =
    "'_' used twice: one '_' makes a dim anonymous ('__foo' is not allowed)";
/// `?a`: jaxtyping's pytree-path dims.
inline constexpr const char* kTreePath =
    "'?' (a dim that depends on the pytree path) is not supported: ein has no pytrees";
/// `#...`, `x=...`.
inline constexpr const char* kEllipsisAlone =
    "'...' must be used on its own; write '*name' for a named variadic dim";
/// `*4`.
inline constexpr const char* kFixedVariadic =
    "a fixed size cannot match several dims ('*4' is not allowed)";
/// `_4`.
inline constexpr const char* kFixedAnonymous =
    "a fixed size cannot be anonymous ('_4' is not allowed)";
/// `#_`.
inline constexpr const char* kAnonymousBroadcastable =
    "a dim cannot be both anonymous and broadcastable ('#_' is not allowed)";
/// `*a+b`.
inline constexpr const char* kSymbolicVariadic =
    "a symbolic size cannot match several dims ('*a+b' is not allowed)";
/// `_a+b`.
inline constexpr const char* kSymbolicAnonymous =
    "a symbolic size cannot be anonymous ('_a+b' is not allowed)";
/// `#`, `*`, `rows=` with nothing after; {} is the dim as written.
inline constexpr const char* kMissingCore = "'{}' is missing its dim name or size";
/// An integer literal beyond int64; {} is the literal.
inline constexpr const char* kIntegerTooLarge = "integer {} is too large for a size";
/// `foo(a)`; {} is the name.
inline constexpr const char* kUnknownFunction =
    "unknown function '{}': symbolic sizes can call min and max";
/// `min(a)`; {} is the function.
inline constexpr const char* kTooFewArguments = "{}() needs at least two arguments";

// --- Whole-spec validation -------------------------------------------------------------

/// `*a *b`, `... *a`; {} is the second variadic as written.
inline constexpr const char* kTwoVariadics =
    "a spec may have only one variadic dim ('*name' or '...'), but '{}' is a second one";
/// Note pointing at the first variadic.
inline constexpr const char* kFirstVariadicNote = "the first variadic dim is here";
/// Parentheses nested past the limit; {} is the limit.
inline constexpr const char* kTooDeep = "parentheses are nested more than {} deep";
/// An unknown name before `[`; {} is the name.
inline constexpr const char* kUnknownDType = "unknown dtype '{}'";
/// Note listing the known dtype names; {} is the list.
inline constexpr const char* kKnownDTypesNote = "known dtypes: {}";

}  // namespace ein::detail::spec_msg
