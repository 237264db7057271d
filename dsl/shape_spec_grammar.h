// The PEGTL grammar of shape specs: `f32[*batch seq d]`, `Float[b c1]`, or a bare dims string
// `batch seq hidden`. Only dsl/shape_spec_parser.cpp and the tests include this header, so
// PEGTL stays out of every other translation unit. The grammar only recognises text; what a
// combination of prefixes means (and which ones jaxtyping rejects) is the parser's job.
//
//   spec     := dtype '[' dims ']' | dims
//   dims     := dim*                              separated by whitespace
//   dim      := prefix* (doc '=')? prefix* core?  prefix is one of # * _ ?
//   core     := '...' | name | integer | expr     expr has no spaces outside parentheses
//   expr     := product (('+' | '-') product)*
//   product  := operand (('*' | '//') operand)*
//   operand  := '(' expr ')' | fn '(' expr (',' expr)* ')' | integer | name
#pragma once

#include <tao/pegtl.hpp>

#include "dsl/shape_spec_messages.h"

namespace ein::grammar::shape_spec {

namespace pegtl = tao::pegtl;

// --- Lexical --------------------------------------------------------------------------

/// A dim or dtype name: an ASCII letter, then letters, digits and underscores.
struct identifier
    : pegtl::seq<pegtl::alpha, pegtl::star<pegtl::sor<pegtl::alnum, pegtl::one<'_'>>>> {};
/// A non-negative integer literal.
struct integer : pegtl::plus<pegtl::digit> {};

// --- Symbolic size expressions ----------------------------------------------------------

/// Optional whitespace inside parentheses; nothing at the top level, where spaces split dims.
template <bool Spaced>
struct gap : pegtl::star<pegtl::space> {};
/// At the top level of a dim, no whitespace is allowed inside an expression.
template <>
struct gap<false> : pegtl::success {};

/// An expression (defined below; operands recurse into it).
template <bool Spaced>
struct sum;

/// An integer operand.
struct int_atom : integer {};
/// A name operand: reads a bound dim.
struct name_atom : identifier {};
/// The expression inside parentheses (defined after sum).
struct paren_body;
/// One argument of a call (defined after sum).
struct call_arg;

/// The `)` that closes a parenthesised expression.
struct paren_close : pegtl::one<')'> {};
/// `( expr )`.
struct paren : pegtl::seq<pegtl::one<'('>, gap<true>, pegtl::must<paren_body>, gap<true>,
                          pegtl::must<paren_close>> {};
/// `min(` or `max(`: the function name and its opening parenthesis.
struct call_head : pegtl::seq<identifier, pegtl::one<'('>> {};
/// The `)` that closes a call.
struct call_close : pegtl::one<')'> {};
/// `fn(expr, expr, ...)`.
struct call : pegtl::seq<call_head, gap<true>, pegtl::must<call_arg>,
                         pegtl::star<gap<true>, pegtl::one<','>, gap<true>, pegtl::must<call_arg>>,
                         gap<true>, pegtl::must<call_close>> {};
/// One operand of an operator.
struct operand : pegtl::sor<paren, call, int_atom, name_atom> {};
/// `//`.
struct floordiv : pegtl::string<'/', '/'> {};
/// `*`, `//`; a lone `/` is committed to an error.
struct mul_op : pegtl::sor<floordiv, pegtl::one<'*'>,
                           pegtl::seq<pegtl::at<pegtl::one<'/'>>, pegtl::must<floordiv>>> {};
/// `* operand` or `// operand`, folded into the left operand.
template <bool Spaced>
struct mul_tail : pegtl::seq<gap<Spaced>, mul_op, gap<Spaced>, pegtl::must<operand>> {};
/// Operands joined by `*` and `//`.
template <bool Spaced>
struct product : pegtl::seq<operand, pegtl::star<mul_tail<Spaced>>> {};
/// `+ product` or `- product`, folded into the left operand.
template <bool Spaced>
struct add_tail : pegtl::seq<gap<Spaced>, pegtl::one<'+', '-'>, gap<Spaced>, pegtl::must<operand>,
                             pegtl::star<mul_tail<Spaced>>> {};
/// Products joined by `+` and `-`.
template <bool Spaced>
struct sum : pegtl::seq<product<Spaced>, pegtl::star<add_tail<Spaced>>> {};
/// The expression inside parentheses.
struct paren_body : sum<true> {};
/// One argument of a call.
struct call_arg : sum<true> {};

// --- Dims ---------------------------------------------------------------------------------

/// `#` broadcastable, `*` variadic, `_` anonymous, `?` pytree path (rejected by the parser).
struct prefix_char : pegtl::one<'#', '*', '_', '?'> {};
/// `rows=` of `rows=4`: a documentation name.
struct doc_name : pegtl::seq<identifier, pegtl::one<'='>> {};
/// `...`.
struct ellipsis : pegtl::string<'.', '.', '.'> {};
/// A character that continues an expression after a name or integer.
struct expr_follow : pegtl::one<'+', '-', '*', '/', '('> {};
/// A name that is the whole core: a named dim (not `(a)`, which is symbolic).
struct plain_name : pegtl::seq<identifier, pegtl::not_at<expr_follow>> {};
/// An integer that is the whole core: a fixed dim.
struct plain_int : pegtl::seq<integer, pegtl::not_at<expr_follow>> {};
/// Any other expression: a symbolic dim.
struct symbolic : sum<false> {};
/// What follows the prefixes and the documentation name.
struct core : pegtl::sor<ellipsis, plain_name, plain_int, symbolic> {};
/// One dim as written; every alternative consumes at least one character.
struct dim : pegtl::sor<pegtl::seq<pegtl::plus<prefix_char>, pegtl::opt<doc_name>,
                                   pegtl::star<prefix_char>, pegtl::opt<core>>,
                        pegtl::seq<doc_name, pegtl::star<prefix_char>, pegtl::opt<core>>, core> {};
/// A comma after a dim (raised).
struct comma_after_dim : pegtl::one<','> {};
/// A `#` after a dim (raised).
struct hash_after_dim : pegtl::one<'#'> {};
/// What may follow a dim: whitespace, `]` or the end; commas and `#` get their own messages.
struct dim_end : pegtl::sor<pegtl::at<pegtl::space>, pegtl::at<pegtl::one<']'>>, pegtl::eof,
                            pegtl::seq<pegtl::at<comma_after_dim>, pegtl::raise<comma_after_dim>>,
                            pegtl::seq<pegtl::at<hash_after_dim>, pegtl::raise<hash_after_dim>>> {};
/// A dim and the check that it ends cleanly.
struct dim_item : pegtl::seq<dim, pegtl::must<dim_end>> {};
/// Whitespace-separated dims, possibly none (a scalar).
struct dims
    : pegtl::seq<pegtl::star<pegtl::space>, pegtl::star<dim_item, pegtl::star<pegtl::space>>> {};

// --- Whole spec -----------------------------------------------------------------------------

/// `f32[`: the dtype name and the opening bracket; matching it commits to the bracketed form.
struct dtype_head : pegtl::seq<identifier, pegtl::star<pegtl::space>, pegtl::one<'['>> {};
/// The closing `]`.
struct close_bracket : pegtl::one<']'> {};
/// The end of input after `]`.
struct end_after_close : pegtl::eof {};
/// The end of input after a bare dims string.
struct end_of_dims : pegtl::eof {};
/// `dtype[dims]`.
struct typed_spec : pegtl::seq<dtype_head, dims, pegtl::must<close_bracket>,
                               pegtl::star<pegtl::space>, pegtl::must<end_after_close>> {};
/// A bare dims string: any dtype.
struct bare_spec : pegtl::seq<dims, pegtl::must<end_of_dims>> {};
/// The top rule.
struct spec : pegtl::seq<pegtl::star<pegtl::space>, pegtl::sor<typed_spec, bare_spec>> {};

// --- Error control ------------------------------------------------------------------------

/// The message raised when `Rule` fails under must<>; nullptr for rules never raised.
template <typename Rule>
inline constexpr const char* error_message = nullptr;
/// The rules raised under must<> and their messages (texts in shape_spec_messages.h).
template <>
inline constexpr const char* error_message<paren_body> = detail::spec_msg::kExpectedParenBody;
template <>
inline constexpr const char* error_message<paren_close> = detail::spec_msg::kExpectedParenClose;
template <>
inline constexpr const char* error_message<call_arg> = detail::spec_msg::kExpectedArgument;
template <>
inline constexpr const char* error_message<call_close> = detail::spec_msg::kExpectedCallClose;
template <>
inline constexpr const char* error_message<operand> = detail::spec_msg::kExpectedOperand;
template <>
inline constexpr const char* error_message<floordiv> = detail::spec_msg::kSlash;
template <>
inline constexpr const char* error_message<comma_after_dim> = detail::spec_msg::kCommaBetweenDims;
template <>
inline constexpr const char* error_message<hash_after_dim> = detail::spec_msg::kTrailingHash;
template <>
inline constexpr const char* error_message<dim_end> = detail::spec_msg::kExpectedSpace;
template <>
inline constexpr const char* error_message<close_bracket> = detail::spec_msg::kExpectedDimOrClose;
template <>
inline constexpr const char* error_message<end_after_close> = detail::spec_msg::kTextAfterClose;
template <>
inline constexpr const char* error_message<end_of_dims> = detail::spec_msg::kExpectedDim;

/// PEGTL control: raises a parse_error carrying the rule's message at the failing position.
template <typename Rule>
struct control : pegtl::normal<Rule> {
  /// Throws; every rule that can be raised must have an error_message.
  template <typename ParseInput, typename... States>
  [[noreturn]] static void raise(const ParseInput& in, States&&... /*unused*/) {
    static_assert(error_message<Rule> != nullptr, "a rule under must<> needs an error_message");
    throw pegtl::parse_error(error_message<Rule>, in);
  }
};

}  // namespace ein::grammar::shape_spec
