// Where each failed must<> of the `.ein` grammar (dsl/script_grammar.h) points and which
// message of dsl/script_messages.h it raises: the error half of the script parser, as PEGTL's
// json example keeps grammar, errors and parse apart. Only dsl/script_parser.cpp includes
// this header. It chooses messages; it builds nothing and checks no meaning.
//
// `control<Rule>::raise` reads the parser's state: `source` and `base` (the text), `ops` (the
// operators awaiting an operand), `open_brackets` and `blocks` (what is open, innermost
// last), `decls` (the declarations being built), the offsets `quote_at`, `number_begin` and
// `type_open_at`, and calls its `fail(message, range)` and `where(offset)`.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <type_traits>

#include <ein/diagnostic.h>
#include "dsl/expr_builder.h"
#include "dsl/script_ast.h"
#include "dsl/script_grammar.h"
#include "dsl/script_messages.h"

namespace ein::script::errors {

namespace g = grammar::script;
namespace msg = ein::messages::script;

/// True for name and number characters.
inline bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

/// Characters that can start or continue some token (or are whitespace); anything else is
/// a stray character.
inline bool is_token_char(char c) {
  return is_word_char(c) ||
         std::string_view(" \t\r\n\"#()[]{},.:;=+-*/%@<>!").find(c) != std::string_view::npos;
}

/// The token at `at`: a run of name/number characters, or one (UTF-8) character; a point at
/// the end of the text.
inline SourceRange token_at(std::string_view text, uint32_t at) {
  if (at >= text.size())
    return {static_cast<uint32_t>(text.size()), static_cast<uint32_t>(text.size())};
  if (!is_word_char(text[at])) return {at, at + utf8_char_size(text.substr(at))};
  uint32_t e = at;
  while (e < text.size() && is_word_char(text[e]))
    ++e;
  return {at, e};
}

/// The token before `at`, skipping whitespace: what an expected expression would follow.
inline std::string_view token_before(std::string_view text, uint32_t at) {
  uint32_t e = std::min<uint32_t>(at, static_cast<uint32_t>(text.size()));
  while (e > 0 && std::isspace(static_cast<unsigned char>(text[e - 1])))
    --e;
  if (e == 0) return "";
  uint32_t s = e - 1;
  if (is_word_char(text[s])) {
    while (s > 0 && is_word_char(text[s - 1]))
      --s;
  } else {
    constexpr std::string_view op_chars = "+-*/%@<>=!.";
    while (s > 0 && e - s < 3 && op_chars.find(text[s]) != std::string_view::npos &&
           op_chars.find(text[s - 1]) != std::string_view::npos)
      --s;
  }
  return text.substr(s, e - s);
}

/// True for the reserved and declaration words.
inline bool is_keyword(std::string_view word) {
  for (std::string_view kw : {"import", "dim", "let", "module", "optimizer", "train", "fn", "param",
                              "state", "for", "return"})
    if (word == kw) return true;
  return false;
}

/// Where a keyword may appear, for a keyword found in the wrong block.
inline std::string misplaced(std::string_view kw) {
  if (kw == "param") return msg::only_inside(kw, "inside a module");
  if (kw == "state") return msg::only_inside(kw, "inside an optimizer");
  if (kw == "return" || kw == "for") return msg::only_inside(kw, "inside a function body");
  if (kw == "fn") return msg::nested_fn();
  return msg::only_inside(kw, "at the top level");
}

/// What a `{` opens, as "expected '}' to close ..." names it: the block of `d`.
inline std::string block_owner(const Decl& d) {
  switch (d.kind) {
    case Decl::Kind::module:
      return fmt::format("the module '{}'", d.name);
    case Decl::Kind::optimizer:
      return fmt::format("the optimizer '{}'", d.name);
    case Decl::Kind::train:
      return "the train block";
    default:
      return fmt::format("the function '{}'", d.name);
  }
}

/// True when Rule is one of Rules.
template <typename Rule, typename... Rules>
inline constexpr bool is_one_of = (std::is_same_v<Rule, Rules> || ...);

/// Turns a failed must<Rule> into a UserError. Every parse message is chosen here.
template <typename Rule>
struct control : tao::pegtl::normal<Rule> {
  /// Raises the UserError for a failed must<Rule>; `b` is the parser's state (see the top).
  template <typename Input, typename State, typename... States>
  [[noreturn]] static void raise(const Input& in, State& b, States&&...) {
    const std::string_view text = b.source->text();
    const auto at = static_cast<uint32_t>(in.current() - b.base);
    const SourceRange token = token_at(text, at);
    const std::string found = printable(b.source->slice(token));
    const bool word = token.size() > 0 && is_word_char(text[at]);
    const bool kw = word && is_keyword(found);

    if constexpr (is_one_of<Rule, g::quote_close>) {
      b.fail(msg::unterminated_string(), {b.quote_at, b.quote_at + 1});
    } else if constexpr (is_one_of<Rule, g::escape_char>) {
      const SourceRange r{at - 1, token.end};
      b.fail(msg::unknown_escape(printable(b.source->slice(r))), r);
    } else if constexpr (is_one_of<Rule, g::number_end, g::exponent_digits>) {
      uint32_t e = at;
      while (e < text.size() && (is_word_char(text[e]) || text[e] == '.'))
        ++e;
      const SourceRange r{b.number_begin, e};
      b.fail(msg::bad_number(printable(b.source->slice(r))), r);
    } else if constexpr (is_one_of<Rule, g::type_close>) {
      b.fail(msg::unclosed_type(), {b.type_open_at, b.type_open_at + 1});
    }
    if (at < text.size() && !is_token_char(text[at]))
      b.fail(msg::unexpected_character(found), token);

    if constexpr (grammar::expr::is_operand<Rule> || is_one_of<Rule, g::range_operand>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_expression(b.ops.back().text, found), token);
    } else if constexpr (is_one_of<Rule, g::item, g::arg, g::kw_value, g::comp_iterable,
                                   g::for_iterable, g::value, g::decl_value, g::param_default,
                                   g::fn_expr_body, g::return_value, g::slice_stop,
                                   g::slice_step>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_expression(token_before(text, at), found), token);
    } else if constexpr (is_one_of<Rule, g::decl_name, g::for_var, g::comp_var, g::attr_name,
                                   g::state_item>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_name(token_before(text, at), found), token);
    } else if constexpr (is_one_of<Rule, g::param>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_param(found), token);
    } else if constexpr (is_one_of<Rule, g::import_target>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_import(found), token);
    } else if constexpr (is_one_of<Rule, g::paren_close, g::call_close, g::params_close,
                                   g::list_close, g::index_close>) {
      const char close = is_one_of<Rule, g::list_close, g::index_close> ? ']' : ')';
      if (found == "=") b.fail(msg::bad_assignment_target(), token);
      b.fail(msg::expected_close(close, b.where(b.open_brackets.back()), found), token);
    } else if constexpr (is_one_of<Rule, g::brace_close>) {
      b.fail(msg::unclosed_brace(b.blocks.back().what, b.where(b.blocks.back().at)), token);
    } else if constexpr (is_one_of<Rule, g::module_block, g::optimizer_block, g::train_block>) {
      b.fail(msg::expected_body(block_owner(b.decls.back()), found), token);
    } else if constexpr (is_one_of<Rule, g::for_block>) {
      b.fail(msg::expected_body("the for loop", found), token);
    } else if constexpr (is_one_of<Rule, g::fn_body>) {
      b.fail(msg::expected_fn_body(b.decls.back().name, found), token);
    } else if constexpr (is_one_of<Rule, g::params>) {
      b.fail(msg::expected_fn_params(b.decls.back().name), token);
    } else if constexpr (is_one_of<Rule, g::top_item, g::module_item, g::optimizer_item,
                                   g::train_item, g::stmt>) {
      if (kw) b.fail(misplaced(found), token);
      if constexpr (is_one_of<Rule, g::top_item>) {
        size_t e = token.end;
        while (e < text.size() && (text[e] == ' ' || text[e] == '\t'))
          ++e;
        if (word && e < text.size() && text[e] == '=' &&
            (e + 1 >= text.size() || text[e + 1] != '='))
          b.fail(msg::top_level_assignment(found), token);
        b.fail(msg::expected_declaration(found), token);
      } else if constexpr (is_one_of<Rule, g::module_item>) {
        b.fail(msg::module_body(found), token);
      } else if constexpr (is_one_of<Rule, g::optimizer_item>) {
        b.fail(msg::optimizer_body(found), token);
      } else if constexpr (is_one_of<Rule, g::train_item>) {
        b.fail(msg::train_body(found), token);
      } else {
        b.fail(msg::expected_statement(found), token);
      }
    } else if constexpr (is_one_of<Rule, g::item_end>) {
      const std::string_view rest = text.substr(at);
      if (rest.starts_with("=") ||
          (rest.size() > 1 && rest[1] == '=' &&
           std::string_view("+-*/").find(rest[0]) != std::string_view::npos))
        b.fail(msg::bad_assignment_target(), token);
      b.fail(msg::expected_end(found), token);
    } else if constexpr (grammar::expr::is_not_chained<Rule>) {
      const uint32_t width = detail::comparison_width(text, at);
      b.fail(msg::chained_comparison(text.substr(at, width)), {at, at + width});
    } else if constexpr (is_one_of<Rule, g::range_not_chained>) {
      b.fail(msg::chained_range(), {at, at + 2});
    } else if constexpr (is_one_of<Rule, g::type_required, g::param_type, g::result_type>) {
      b.fail(msg::expected_type(found), token);
    } else if constexpr (is_one_of<Rule, g::type_open>) {
      const std::string_view dtype = token_before(text, at);
      b.fail(msg::type_needs_brackets(dtype), token);
    } else if constexpr (is_one_of<Rule, g::decl_eq>) {
      const Decl& d = b.decls.back();
      b.fail(msg::expected_eq(d.kind == Decl::Kind::dim ? "dim" : "let", d.name), token);
    } else if constexpr (is_one_of<Rule, g::param_colon>) {
      b.fail(msg::param_needs_type(b.decls.back().name), token);
    } else if constexpr (is_one_of<Rule, g::for_in, g::comp_in>) {
      b.fail(msg::expected_in(token_before(text, at), found), token);
    } else if constexpr (is_one_of<Rule, g::index_item>) {
      b.fail(msg::expected_index(found), token);
    } else {
      b.fail(msg::unexpected(found), token);
    }
  }
};

}  // namespace ein::script::errors
