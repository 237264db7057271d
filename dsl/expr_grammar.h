// The operator precedence ladder shared by map expressions (dsl/map_grammar.h) and `.ein`
// scripts (dsl/script_grammar.h), as PEGTL rule templates over a language's traits. The ladder
// (which level binds tighter, associativity, the unchained comparison) is written once here;
// what an operand is, where whitespace may go and which operator tokens each level accepts
// stay the language's, so each language accepts exactly its own syntax. Only dsl/*.cpp, the
// language grammars and the grammar tests include this header.
//
//   compare  := sum ( cmp_op sum )?                    `a < b < c` is an error
//   sum      := product ( add_op product )*
//   product  := unary ( mul_op unary )*
//   unary    := prefix_op unary | power
//   power    := atom ( '**' unary )?                   right-associative; -x**2 == -(x**2)
//
// A language L is a struct naming five rules:
//   L::atom      the operand of the ladder (map: a primary; script: a primary with postfixes)
//   L::sp        whitespace before an infix operator (the script's stops at a newline)
//   L::ws        whitespace after any operator (newlines included in both languages)
//   L::prefix    the prefix operator tokens (map: `-`; script: `-` `+`)
//   L::mul, L::add   the multiplicative and additive tokens (the script adds `//` `%` `@`)
// Every operand an operator requires is a distinct rule under must<>, so a language's
// control can say "expected an operand" at the spot (`is_operand` lists them).
#pragma once

#include <tao/pegtl.hpp>

namespace ein::grammar::expr {

namespace pegtl = tao::pegtl;

template <typename L>
struct unary;
template <typename L>
struct product;
template <typename L>
struct sum;

/// `op operand` after a complete left operand: whitespace, the operator, whitespace, and an
/// operand the operator commits to. Every infix level's tail is one of these.
template <typename L, typename Op, typename Operand>
struct infix : pegtl::seq<typename L::sp, Op, typename L::ws, pegtl::must<Operand>> {};

/// `**`, binding tighter than a prefix operator on its left: -x**2 == -(x**2).
template <typename L>
struct pow_op : pegtl::string<'*', '*'> {};
/// The right operand of `**`; a unary, so `2**-1` parses and `**` is right-associative.
template <typename L>
struct pow_operand : unary<L> {};
/// `** operand`: folded into a binary node once the operand is complete.
template <typename L>
struct power_tail : infix<L, pow_op<L>, pow_operand<L>> {};
/// An atom, optionally raised to a power.
template <typename L>
struct power : pegtl::seq<typename L::atom, pegtl::opt<power_tail<L>>> {};

/// A prefix operator token.
template <typename L>
struct prefix_op : L::prefix {};
/// The operand of a prefix operator.
template <typename L>
struct prefix_operand : unary<L> {};
/// `-x` (and, where the language has it, `+x`): folded into a unary node.
template <typename L>
struct negation : pegtl::seq<prefix_op<L>, typename L::ws, pegtl::must<prefix_operand<L>>> {};
/// A prefixed unary or a power.
template <typename L>
struct unary : pegtl::sor<negation<L>, power<L>> {};

/// A multiplicative operator token.
template <typename L>
struct mul_op : L::mul {};
/// The right operand of a multiplicative operator.
template <typename L>
struct product_operand : unary<L> {};
/// `* operand`: folded left to right.
template <typename L>
struct product_tail : infix<L, mul_op<L>, product_operand<L>> {};
/// Unaries joined by multiplicative operators.
template <typename L>
struct product : pegtl::seq<unary<L>, pegtl::star<product_tail<L>>> {};

/// An additive operator token.
template <typename L>
struct add_op : L::add {};
/// The right operand of an additive operator.
template <typename L>
struct sum_operand : product<L> {};
/// `+ operand`: folded left to right.
template <typename L>
struct sum_tail : infix<L, add_op<L>, sum_operand<L>> {};
/// Products joined by additive operators.
template <typename L>
struct sum : pegtl::seq<product<L>, pegtl::star<sum_tail<L>>> {};

/// The comparisons, the same in both languages (longest spelling first).
template <typename L>
struct cmp_op : pegtl::sor<pegtl::string<'<', '='>, pegtl::string<'>', '='>,
                           pegtl::string<'=', '='>, pegtl::string<'!', '='>, pegtl::one<'<', '>'>> {
};
/// The right operand of a comparison.
template <typename L>
struct compare_operand : sum<L> {};
/// `< operand`: folded into a binary node.
template <typename L>
struct compare_tail : infix<L, cmp_op<L>, compare_operand<L>> {};
/// Comparisons do not chain (Python's `a < b < c` means `a < b and b < c`): raised.
template <typename L>
struct not_chained : pegtl::not_at<cmp_op<L>> {};
/// The top of the ladder: a sum, optionally compared with one other sum.
template <typename L>
struct compare
    : pegtl::seq<sum<L>, pegtl::opt<compare_tail<L>, typename L::sp, pegtl::must<not_chained<L>>>> {
};

/// True for the rules that require an operand after an operator (each under must<>).
template <typename Rule>
inline constexpr bool is_operand = false;
template <typename L>
inline constexpr bool is_operand<pow_operand<L>> = true;
template <typename L>
inline constexpr bool is_operand<prefix_operand<L>> = true;
template <typename L>
inline constexpr bool is_operand<product_operand<L>> = true;
template <typename L>
inline constexpr bool is_operand<sum_operand<L>> = true;
template <typename L>
inline constexpr bool is_operand<compare_operand<L>> = true;

/// True for the rule that fails on a second comparison operator.
template <typename Rule>
inline constexpr bool is_not_chained = false;
template <typename L>
inline constexpr bool is_not_chained<not_chained<L>> = true;

}  // namespace ein::grammar::expr
