// PEGTL grammar of einops patterns. Only dsl/pattern_parser.cpp and the grammar tests
// include this header: PEGTL templates stay out of everything else.
//
//   pattern  := inputs ( '->' side )? end
//   inputs   := side ( ',' side )*
//   side     := ( term )*                       separated by blanks
//   term     := group | token
//   group    := '(' token* ')'                  one level: no '(' inside
//   token    := ellipsis | number | name | '*'
//   ellipsis := '...' | '…'                     not glued to a name or more dots
//   number   := digit+                          not glued to letters ("1h" is no name)
//   name     := [A-Za-z_][A-Za-z0-9_]*          not glued to dots ("pre...")
//
// The grammar accepts a superset of every op's patterns; which constructs an op allows
// (commas, '*', '...' in parentheses, underscores) is sema's call, so its messages can
// name the op.
#pragma once

#include <tao/pegtl.hpp>

namespace ein::grammar::pattern {

namespace pegtl = tao::pegtl;

struct ws : pegtl::star<pegtl::blank> {};
struct name_first : pegtl::ranges<'a', 'z', 'A', 'Z', '_'> {};
struct name_other : pegtl::ranges<'a', 'z', 'A', 'Z', '0', '9', '_'> {};
struct dot : pegtl::one<'.'> {};
struct dots : pegtl::sor<pegtl::string<'.', '.', '.'>, pegtl::string<'\xE2', '\x80', '\xA6'>> {};

// "Glued" checks: what may not follow a token directly. Each raises its own message.
struct unicode_ellipsis : pegtl::string<'\xE2', '\x80', '\xA6'> {};
struct glue : pegtl::sor<name_other, dot, unicode_ellipsis> {};
struct ellipsis_end : pegtl::not_at<glue> {};
struct number_end : pegtl::not_at<glue> {};
struct name_end : pegtl::not_at<pegtl::sor<dot, unicode_ellipsis>> {};

struct ellipsis : pegtl::seq<dots, pegtl::must<ellipsis_end>> {};
struct number : pegtl::seq<pegtl::plus<pegtl::digit>, pegtl::must<number_end>> {};
struct name : pegtl::seq<name_first, pegtl::star<name_other>, pegtl::must<name_end>> {};
struct star_axis : pegtl::one<'*'> {};
struct token : pegtl::sor<ellipsis, number, name, star_axis> {};

struct open_paren : pegtl::one<'('> {};
struct close_paren : pegtl::one<')'> {};
struct group_body : pegtl::seq<ws, pegtl::star<token, ws>> {};
struct group : pegtl::if_must<open_paren, group_body, close_paren> {};

struct term : pegtl::sor<group, token> {};
struct side : pegtl::seq<ws, pegtl::star<term, ws>> {};
struct input_side : side {};
struct output_side : side {};
struct arrow : pegtl::string<'-', '>'> {};
struct comma : pegtl::one<','> {};
struct end : pegtl::eof {};

/// The whole pattern; raises (through the parser's control) on the first error.
struct grammar
    : pegtl::seq<pegtl::list<input_side, comma>, pegtl::opt<arrow, output_side>, pegtl::must<end>> {
};

}  // namespace ein::grammar::pattern
