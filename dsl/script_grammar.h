// PEGTL grammar of `.ein` model scripts. Only dsl/script_parser.cpp and the grammar tests
// include this header: PEGTL templates stay out of everything else.
//
//   file      := ( top_item sep )*                      top: import dim let module optimizer fn train
//   module    := 'module' name params? '{' ( (param | member | fn) sep )* '}'
//   optimizer := 'optimizer' name params? '{' ( (state | member | fn) sep )* '}'
//   train     := 'train' '{' ( (member | fn) sep )* '}'
//   fn        := 'fn' name params ( '->' type )? ( '=' expr | '{' ( stmt sep )* '}' )
//   param     := 'param' name ':' type ( '=' expr )?      state := 'state' item ( ',' item )*
//   stmt      := for | return | name aug_op expr | names '=' expr | expr
//   expr      := compare ( '..' compare )?               ranges and comparisons do not chain
//   compare   := sum ( cmp_op sum )?                     the ladder of dsl/expr_grammar.h,
//   sum       := product ( ('+'|'-') product )*          shared with map expressions;
//   unary     := ('-'|'+') unary | power                 product: * / // % @
//   power     := postfix ( '**' unary )?
//   postfix   := primary ( call | index | '.' name )*
//   primary   := number | string | name | '(' ... ')' | '[' ... ']'
//   type      := dtype '[' any-but-']' ']'                 handed to parse_shape_spec
//
// Newlines. Outside brackets a newline ends a statement or declaration (as does ';'), except
// right after a binary operator, '=', ',', '->', '(', '[', '{' and before ')', ']', '}'. So
// `x = a` NEWLINE `-b` is two statements and a '(' opening a line is not a call. Inside
// '(' and '[' every newline is whitespace (Python's implicit continuation): the `sp` rule
// reads the parse state's `bracket_depth`, which the parser's actions keep up to date.
// '#' starts a comment to the end of the line. The keywords fn, for and return are not names;
// the declaration words (import dim let module optimizer train param state) and `in` are
// names wherever a declaration cannot start.
//
// Every rule that has an action is committed once it has started (if_must / must), so no
// action ever fires for text that is later given back.
#pragma once

#include <tao/pegtl.hpp>

#include "dsl/expr_grammar.h"

namespace ein::grammar::script {

namespace pegtl = tao::pegtl;

// ---- lexical --------------------------------------------------------------------------

struct comment : pegtl::seq<pegtl::one<'#'>, pegtl::star<pegtl::not_one<'\n'>>> {};
/// Whitespace that never ends a statement.
struct blank : pegtl::sor<pegtl::one<' ', '\t', '\r'>, comment> {};
/// Spaces and comments on one line.
struct sp_flat : pegtl::star<blank> {};
/// Spaces, comments and newlines: after tokens that cannot end a statement.
struct ws : pegtl::star<pegtl::sor<blank, pegtl::one<'\n'>>> {};
/// Between items of a block: also empty statements.
struct gap : pegtl::star<pegtl::sor<blank, pegtl::one<'\n', ';'>>> {};

/// Whitespace between the tokens of an expression: `ws` inside brackets, `sp_flat` outside.
/// The first parse state must have an integer `bracket_depth`.
struct sp : sp_flat {
  template <pegtl::apply_mode A, pegtl::rewind_mode M, template <typename...> class Action,
            template <typename...> class Control, typename ParseInput, typename State,
            typename... States>
  static bool match(ParseInput& in, State& state, States&... states) {
    if (state.bracket_depth > 0)
      return Control<ws>::template match<A, M, Action, Control>(in, state, states...);
    return Control<sp_flat>::template match<A, M, Action, Control>(in, state, states...);
  }
};

struct name_first : pegtl::ranges<'a', 'z', 'A', 'Z', '_'> {};
struct name_other : pegtl::ranges<'a', 'z', 'A', 'Z', '0', '9', '_'> {};
struct identifier : pegtl::seq<name_first, pegtl::star<name_other>> {};

template <char... Cs>
struct kw : pegtl::seq<pegtl::string<Cs...>, pegtl::not_at<name_other>> {};
struct kw_import : kw<'i', 'm', 'p', 'o', 'r', 't'> {};
struct kw_dim : kw<'d', 'i', 'm'> {};
struct kw_let : kw<'l', 'e', 't'> {};
struct kw_module : kw<'m', 'o', 'd', 'u', 'l', 'e'> {};
struct kw_optimizer : kw<'o', 'p', 't', 'i', 'm', 'i', 'z', 'e', 'r'> {};
struct kw_train : kw<'t', 'r', 'a', 'i', 'n'> {};
struct kw_fn : kw<'f', 'n'> {};
struct kw_param : kw<'p', 'a', 'r', 'a', 'm'> {};
struct kw_state : kw<'s', 't', 'a', 't', 'e'> {};
struct kw_for : kw<'f', 'o', 'r'> {};
struct kw_return : kw<'r', 'e', 't', 'u', 'r', 'n'> {};
struct kw_in : kw<'i', 'n'> {};  // not reserved: only expected after `for name`
/// Reserved words: those that start a statement or a function. The declaration words (import
/// dim let module optimizer train param state) only mean something where a declaration may
/// start, so they stay usable as names: `module Cruncher(dim, n)`, `optimizer = AdamW()`.
struct keyword : pegtl::sor<kw_fn, kw_for, kw_return> {};
/// A name that is not a keyword.
struct name : pegtl::seq<pegtl::not_at<keyword>, identifier> {};

// ---- literals -------------------------------------------------------------------------

struct digits : pegtl::plus<pegtl::digit> {};
struct exponent_digits : digits {};
struct exponent : pegtl::seq<pegtl::one<'e', 'E'>, pegtl::opt<pegtl::one<'+', '-'>>,
                             pegtl::must<exponent_digits>> {};
/// `3.` is a float but `0..L` is a range: a '.' followed by '.' is not part of the number.
struct mantissa
    : pegtl::sor<pegtl::seq<digits, pegtl::opt<pegtl::one<'.'>, pegtl::not_at<pegtl::one<'.'>>,
                                               pegtl::star<pegtl::digit>>>,
                 pegtl::seq<pegtl::one<'.'>, digits>> {};
/// A number may not run into letters (`2x`).
struct number_end : pegtl::not_at<name_other> {};
struct number : pegtl::seq<mantissa, pegtl::opt<exponent>, pegtl::must<number_end>> {};

struct quote_open : pegtl::one<'"'> {};
struct quote_close : pegtl::one<'"'> {};
struct escape_char : pegtl::one<'"', '\\', 'n', 't'> {};
struct escape : pegtl::if_must<pegtl::one<'\\'>, escape_char> {};
struct string_chars : pegtl::star<pegtl::sor<escape, pegtl::not_one<'"', '\\', '\n'>>> {};
struct string_lit : pegtl::if_must<quote_open, string_chars, quote_close> {};

// ---- expressions ----------------------------------------------------------------------

struct expr;
/// An expression required at this point; each raises "expected an expression after ...".
struct item;     // in a list, a tuple or parentheses
struct pos_arg;
struct kw_value;
struct slice_start;
struct slice_stop;
struct slice_step;
struct comp_iterable;

struct paren_open : pegtl::one<'('> {};
struct paren_close : pegtl::one<')'> {};
struct paren_comma : pegtl::one<','> {};
/// `(e)`, `(a, b)`, `(a,)`, `()`.
struct paren : pegtl::if_must<paren_open, sp,
                              pegtl::opt<pegtl::not_at<paren_close>, item,
                                         pegtl::star<sp, paren_comma, sp, pegtl::not_at<paren_close>,
                                                     pegtl::must<item>>,
                                         pegtl::opt<sp, paren_comma>>,
                              sp, paren_close> {};

struct list_open : pegtl::one<'['> {};
struct list_close : pegtl::one<']'> {};
struct comp_var : name {};
struct comp_in : kw_in {};
struct comprehension_tail
    : pegtl::if_must<pegtl::seq<sp, kw_for>, sp, comp_var, sp, comp_in, sp, comp_iterable> {};
struct list_tail : pegtl::seq<pegtl::star<sp, pegtl::one<','>, sp, pegtl::not_at<list_close>,
                                          pegtl::must<item>>,
                              pegtl::opt<sp, pegtl::one<','>>> {};
/// `[a, b]`, `[]`, `[e for x in xs]`.
struct list : pegtl::if_must<list_open, sp,
                             pegtl::opt<pegtl::not_at<list_close>, item,
                                        pegtl::sor<comprehension_tail, list_tail>>,
                             sp, list_close> {};

struct name_ref : name {};
struct primary : pegtl::sor<number, string_lit, name_ref, paren, list> {};

struct call_open : pegtl::one<'('> {};
struct call_close : pegtl::one<')'> {};
struct kw_name : identifier {};
struct kw_arg : pegtl::seq<pegtl::at<identifier, sp, pegtl::one<'='>, pegtl::not_at<pegtl::one<'='>>>,
                           kw_name, sp, pegtl::one<'='>, sp, pegtl::must<kw_value>> {};
struct arg : pegtl::sor<kw_arg, pos_arg> {};
struct call_args : pegtl::opt<pegtl::not_at<call_close>, pegtl::must<arg>,
                              pegtl::star<sp, pegtl::one<','>, sp, pegtl::not_at<call_close>,
                                          pegtl::must<arg>>,
                              pegtl::opt<sp, pegtl::one<','>>> {};
struct call : pegtl::if_must<call_open, sp, call_args, sp, call_close> {};

struct index_open : pegtl::one<'['> {};
struct index_close : pegtl::one<']'> {};
struct ellipsis_item : pegtl::string<'.', '.', '.'> {};
struct slice_colon : pegtl::one<':'> {};
struct slice_step_colon : pegtl::one<':'> {};
struct slice_step_tail
    : pegtl::seq<slice_step_colon, sp,
                 pegtl::opt<pegtl::not_at<pegtl::one<',', ']'>>, slice_step>> {};
struct slice_tail
    : pegtl::seq<slice_colon, sp,
                 pegtl::opt<pegtl::not_at<pegtl::one<',', ']', ':'>>, slice_stop>,
                 pegtl::opt<sp, slice_step_tail>> {};
struct slice_or_single
    : pegtl::sor<slice_tail, pegtl::seq<slice_start, pegtl::opt<sp, slice_tail>>> {};
struct index_item : pegtl::sor<ellipsis_item, slice_or_single> {};
struct index : pegtl::if_must<index_open, sp, index_item,
                              pegtl::star<sp, pegtl::one<','>, sp, pegtl::not_at<index_close>,
                                          pegtl::must<index_item>>,
                              pegtl::opt<sp, pegtl::one<','>>, sp, index_close> {};

struct dot : pegtl::seq<pegtl::one<'.'>, pegtl::not_at<pegtl::one<'.'>>> {};
struct attr_name : name {};
struct attribute : pegtl::if_must<dot, sp, attr_name> {};

struct postfix_op : pegtl::seq<sp, pegtl::sor<call, index, attribute>> {};
struct postfix : pegtl::seq<primary, pegtl::star<postfix_op>> {};

/// The script language for the shared ladder (dsl/expr_grammar.h): a newline ends the
/// expression before an operator outside brackets but not after one; `-` `+` are the prefix
/// operators; `*` `/` `//` `%` `@` (not `**` or an `*=` ...) and `+` `-` (not `+=` `->`) the
/// infix ones.
struct ops {
  using atom = postfix;                ///< operands: primaries with calls, indices, members
  using sp = script::sp;               ///< before an operator: no newline outside brackets
  using ws = script::ws;               ///< after an operator: newlines too
  using prefix = pegtl::one<'-', '+'>;  ///< `-x`, `+x`
  /// `*` `//` `/` `%` `@`, not the start of `**` `*=` `/=` `//=`.
  using mul = pegtl::sor<pegtl::seq<pegtl::string<'/', '/'>, pegtl::not_at<pegtl::one<'='>>>,
                         pegtl::seq<pegtl::one<'*'>, pegtl::not_at<pegtl::one<'*', '='>>>,
                         pegtl::seq<pegtl::one<'/'>, pegtl::not_at<pegtl::one<'/', '='>>>,
                         pegtl::one<'%', '@'>>;
  /// `+` `-`, not the start of `+=` `-=` `->`.
  using add = pegtl::seq<pegtl::one<'+', '-'>, pegtl::not_at<pegtl::one<'=', '>'>>>;
};
/// The operator ladder over postfix expressions; ranges sit above it.
struct compare : grammar::expr::compare<ops> {};

struct range_op : pegtl::string<'.', '.'> {};
struct range_operand : compare {};
struct range_tail : grammar::expr::infix<ops, range_op, range_operand> {};
struct range_not_chained : pegtl::not_at<range_op> {};
struct expr : pegtl::seq<compare, pegtl::opt<range_tail, sp, pegtl::must<range_not_chained>>> {};
struct item : expr {};
struct pos_arg : expr {};
struct kw_value : expr {};
struct slice_start : expr {};
struct slice_stop : expr {};
struct slice_step : expr {};
struct comp_iterable : expr {};

// ---- types ----------------------------------------------------------------------------

struct type_open : pegtl::one<'['> {};
struct type_close : pegtl::one<']'> {};
/// `f32[*b s d]`: the text from the dtype to the first ']' goes to parse_shape_spec.
struct type : pegtl::seq<identifier, pegtl::must<type_open>,
                         pegtl::star<pegtl::not_one<']', '\n'>>, pegtl::must<type_close>> {};
struct type_required : type {};

// ---- statements -----------------------------------------------------------------------

struct stmt;
/// After an item of a block: ';', a newline, or the end of the block or file.
struct item_end : pegtl::sor<pegtl::one<';', '\n'>, pegtl::at<pegtl::one<'}'>>, pegtl::eof> {};

struct brace_open : pegtl::one<'{'> {};
struct brace_close : pegtl::one<'}'> {};
template <typename Item>
struct block_items : pegtl::seq<pegtl::star<gap, pegtl::not_at<brace_close>, pegtl::not_at<pegtl::eof>,
                                            pegtl::must<Item>, sp_flat, pegtl::must<item_end>>,
                                gap> {};

struct stmt_begin : pegtl::success {};
struct stmt_body : block_items<stmt> {};
struct for_block : pegtl::if_must<brace_open, stmt_body, brace_close> {};
struct for_var : name {};
struct for_in : kw_in {};
struct for_iterable : expr {};
struct for_stmt : pegtl::if_must<kw_for, sp_flat, for_var, sp_flat, for_in, ws, for_iterable,
                                 sp_flat, for_block> {};

struct return_kw : kw_return {};
struct return_value : pegtl::seq<expr, pegtl::star<sp_flat, pegtl::one<','>, ws, pegtl::must<item>>> {};
struct return_end : pegtl::sor<pegtl::one<';', '\n', '}'>, pegtl::eof> {};
struct return_stmt : pegtl::if_must<return_kw, sp_flat,
                                    pegtl::sor<pegtl::at<return_end>, return_value>> {};

struct target : name {};
struct targets : pegtl::seq<name, pegtl::star<sp_flat, pegtl::one<','>, ws, name>> {};
struct assign_eq : pegtl::seq<pegtl::one<'='>, pegtl::not_at<pegtl::one<'='>>> {};
struct value : expr {};
struct assign_stmt
    : pegtl::seq<pegtl::at<targets, sp_flat, assign_eq>, target,
                 pegtl::star<sp_flat, pegtl::one<','>, ws, target>, sp_flat, assign_eq, ws,
                 pegtl::must<value>> {};
struct aug_op : pegtl::seq<pegtl::one<'+', '-', '*', '/'>, pegtl::one<'='>> {};
struct aug_stmt : pegtl::seq<pegtl::at<name, sp_flat, aug_op>, target, sp_flat, aug_op, ws,
                             pegtl::must<value>> {};
struct expr_stmt : expr {};
struct stmt : pegtl::seq<stmt_begin,
                         pegtl::sor<for_stmt, return_stmt, aug_stmt, assign_stmt, expr_stmt>> {};

// ---- declarations ---------------------------------------------------------------------

struct decl_name : name {};
struct decl_eq : pegtl::one<'='> {};

struct params_open : pegtl::one<'('> {};
struct params_close : pegtl::one<')'> {};
struct param_name : name {};
struct param_default : expr {};
struct param_colon : pegtl::one<':'> {};
struct param_type : type {};
struct param : pegtl::seq<param_name, pegtl::opt<sp, param_colon, sp, pegtl::must<param_type>>,
                          pegtl::opt<sp, pegtl::one<'='>, sp, pegtl::must<param_default>>> {};
struct params
    : pegtl::if_must<params_open, sp,
                     pegtl::opt<pegtl::not_at<params_close>, pegtl::must<param>,
                                pegtl::star<sp, pegtl::one<','>, sp, pegtl::not_at<params_close>,
                                            pegtl::must<param>>,
                                pegtl::opt<sp, pegtl::one<','>>>,
                     sp, params_close> {};

struct import_path : string_lit {};
struct import_name : name {};
struct import_target : pegtl::sor<import_path, import_name> {};
struct import_decl : pegtl::if_must<kw_import, sp_flat, import_target> {};

struct decl_value : expr {};
struct dim_decl : pegtl::if_must<kw_dim, sp_flat, decl_name, sp_flat, decl_eq, ws, decl_value> {};
struct let_decl : pegtl::if_must<kw_let, sp_flat, decl_name, sp_flat, decl_eq, ws, decl_value> {};

struct result_type : type {};
struct arrow : pegtl::string<'-', '>'> {};
struct fn_expr_body : expr {};
struct fn_block : pegtl::if_must<brace_open, stmt_body, brace_close> {};
struct fn_body
    : pegtl::sor<pegtl::if_must<pegtl::one<'='>, ws, fn_expr_body>, fn_block> {};
struct fn_decl : pegtl::if_must<kw_fn, sp_flat, decl_name, sp_flat, params, sp_flat,
                                pegtl::opt<arrow, ws, pegtl::must<result_type>, sp_flat>,
                                fn_body> {};

struct param_decl : pegtl::if_must<kw_param, sp_flat, decl_name, sp_flat, param_colon, ws,
                                   type_required,
                                   pegtl::opt<sp_flat, decl_eq, ws, pegtl::must<decl_value>>> {};

/// A member may be called like a keyword (`optimizer = AdamW()` in a train block): the `=`
/// after it decides.
struct member_name : identifier {};
struct member_decl : pegtl::seq<pegtl::at<identifier, sp_flat, assign_eq>, member_name, sp_flat,
                                assign_eq, ws, pegtl::must<decl_value>> {};

struct state_name : name {};
struct state_item : pegtl::seq<state_name, pegtl::opt<sp_flat, decl_eq, ws, pegtl::must<decl_value>>> {};
struct state_decl : pegtl::if_must<kw_state, sp_flat, state_item,
                                   pegtl::star<sp_flat, pegtl::one<','>, ws, pegtl::must<state_item>>> {};

struct module_item : pegtl::sor<member_decl, param_decl, fn_decl> {};
struct optimizer_item : pegtl::sor<member_decl, state_decl, fn_decl> {};
struct train_item : pegtl::sor<member_decl, fn_decl> {};

struct module_block : pegtl::if_must<brace_open, block_items<module_item>, brace_close> {};
struct optimizer_block : pegtl::if_must<brace_open, block_items<optimizer_item>, brace_close> {};
struct train_block : pegtl::if_must<brace_open, block_items<train_item>, brace_close> {};

struct module_decl : pegtl::if_must<kw_module, sp_flat, decl_name, sp_flat, pegtl::opt<params, sp_flat>,
                                    module_block> {};
struct optimizer_decl : pegtl::if_must<kw_optimizer, sp_flat, decl_name, sp_flat,
                                       pegtl::opt<params, sp_flat>, optimizer_block> {};
struct train_decl : pegtl::if_must<kw_train, sp_flat, train_block> {};

struct top_item : pegtl::sor<import_decl, dim_decl, let_decl, module_decl, optimizer_decl, fn_decl,
                             train_decl> {};

/// A whole script; raises (through the parser's control) on the first error.
struct grammar : pegtl::seq<gap, pegtl::star<pegtl::not_at<pegtl::eof>, pegtl::must<top_item>,
                                             sp_flat, pegtl::must<item_end>, gap>,
                            pegtl::eof> {};

}  // namespace ein::grammar::script
