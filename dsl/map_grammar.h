// PEGTL grammar of map expressions. Only dsl/map_parser.cpp and the grammar tests include
// this header: PEGTL templates stay out of everything else.
//
//   map      := input ( ',' input )* '->' compare end
//   input    := name '[' name* ']'                    `s[]` is a scalar input
//   compare  := sum ( cmp_op sum )?                    `a < b < c` is an error
//   sum      := product ( ( '+' | '-' ) product )*
//   product  := unary ( ( '*' | '/' ) unary )*
//   unary    := '-' unary | power
//   power    := primary ( '**' unary )?                right-associative; -x**2 == -(x**2)
//   primary  := '(' compare ')' | number | name '(' args? ')' | 'inf' | name
//   args     := compare ( ',' compare )*
//   number   := ( digit+ ( '.' digit* )? | '.' digit+ ) ( [eE] [+-]? digit+ )?
//   name     := [A-Za-z_][A-Za-z0-9_]*
//
// Whitespace (newlines included) may separate any two tokens. Python's precedence and
// associativity throughout. The operator ladder (compare down to power) is the one
// dsl/expr_grammar.h shares with `.ein` scripts; `ops` below says which tokens map
// expressions accept at each level. Function names are not checked here; sema does that.
#pragma once

#include <tao/pegtl.hpp>

#include "dsl/expr_grammar.h"

namespace ein::grammar::map {

namespace pegtl = tao::pegtl;

// ---- lexical --------------------------------------------------------------------------

struct ws : pegtl::star<pegtl::space> {};
struct name_first : pegtl::ranges<'a', 'z', 'A', 'Z', '_'> {};
struct name_other : pegtl::ranges<'a', 'z', 'A', 'Z', '0', '9', '_'> {};
/// An identifier: input, axis and function names.
struct identifier : pegtl::seq<name_first, pegtl::star<name_other>> {};

struct digits : pegtl::plus<pegtl::digit> {};
struct exponent_digits : digits {};
/// `e-5`: once the `e` is glued to digits, a (signed) integer must follow.
struct exponent : pegtl::seq<pegtl::one<'e', 'E'>, pegtl::opt<pegtl::one<'+', '-'>>,
                             pegtl::must<exponent_digits>> {};
struct mantissa
    : pegtl::sor<pegtl::seq<digits, pegtl::opt<pegtl::one<'.'>, pegtl::star<pegtl::digit>>>,
                 pegtl::seq<pegtl::one<'.'>, digits>> {};
/// A number may not run into letters or another dot (`2x`, `1.5.2`).
struct number_end : pegtl::not_at<pegtl::sor<name_other, pegtl::one<'.'>>> {};
struct number : pegtl::seq<mantissa, pegtl::opt<exponent>, pegtl::must<number_end>> {};
/// `inf`, the one named constant (so `-inf` can fill masks); not a prefix of a longer name.
struct inf_literal : pegtl::seq<pegtl::string<'i', 'n', 'f'>, pegtl::not_at<name_other>> {};

// ---- expressions: atoms here, the operator ladder in dsl/expr_grammar.h ---------------

struct compare;
/// Operands required after '(' or ',': each raises "expected an operand", as the ladder's do.
struct paren_body;
struct call_arg;

struct open_paren : pegtl::one<'('> {};
struct close_paren : pegtl::one<')'> {};
struct paren : pegtl::if_must<open_paren, ws, paren_body, ws, close_paren> {};

struct call_name : identifier {};
/// `tanh(`: a name followed by `(` commits to a call.
struct call_head : pegtl::seq<call_name, ws, pegtl::one<'('>> {};
struct call_close : pegtl::one<')'> {};
struct comma : pegtl::one<','> {};
struct call_args : pegtl::opt<pegtl::not_at<pegtl::one<')'>>, pegtl::must<call_arg>,
                              pegtl::star<ws, comma, ws, pegtl::must<call_arg>>> {};
struct call : pegtl::if_must<call_head, ws, call_args, ws, call_close> {};

struct name_ref : identifier {};
struct primary : pegtl::sor<paren, number, call, inf_literal, name_ref> {};

/// The map language for the shared ladder: whitespace (newlines too) anywhere, `-` the one
/// prefix operator, `*` `/` (not `**` or `//`) and `+` `-` the infix ones.
struct ops {
  using atom = primary;            ///< operands
  using sp = map::ws;              ///< before an operator
  using ws = map::ws;              ///< after an operator
  using prefix = pegtl::one<'-'>;  ///< `-x` only
  /// `*` `/`, not `**` (the power level's) or `//` (reported as floor division).
  using mul = pegtl::seq<pegtl::one<'*', '/'>, pegtl::not_at<pegtl::one<'*', '/'>>>;
  using add = pegtl::one<'+', '-'>;  ///< `+` `-`
};

/// The whole expression: Python's precedence and associativity, comparisons unchained.
struct compare : grammar::expr::compare<ops> {};
struct paren_body : compare {};
struct call_arg : compare {};

// ---- inputs and the whole ---------------------------------------------------------------

struct input_name : identifier {};
struct axis_name : identifier {};
struct open_bracket : pegtl::one<'['> {};
struct close_bracket : pegtl::one<']'> {};
struct input : pegtl::seq<input_name, ws, pegtl::must<open_bracket>, ws, pegtl::star<axis_name, ws>,
                          pegtl::must<close_bracket>> {};
struct first_input : input {};
struct next_input : input {};
struct arrow : pegtl::string<'-', '>'> {};
struct body : compare {};
struct end : pegtl::eof {};

/// The whole map expression; raises (through the parser's control) on the first error.
struct grammar
    : pegtl::seq<ws, pegtl::must<first_input>, pegtl::star<ws, comma, ws, pegtl::must<next_input>>,
                 ws, pegtl::must<arrow>, ws, pegtl::must<body>, ws, pegtl::must<end>> {};

}  // namespace ein::grammar::map
