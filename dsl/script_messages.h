// Every user-facing message of the .ein script parser (dsl/script_parser.cpp), in one place so
// they can be reviewed together. Messages state the broken rule and the facts; locations and
// carets are added by UserError. `found` is the offending text, already made printable; empty
// means the end of the file.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include <string>
#include <string_view>

namespace ein::messages::script {


inline std::string found_text(std::string_view found) {
  if (found.empty()) return "the end of the file";
  return fmt::format("'{}'", found);
}
inline std::string unexpected_character(std::string_view c) {
  return fmt::format("unexpected character '{}'", c);
}
inline std::string keyword_as_name(std::string_view kw) {
  return fmt::format("'{}' is a keyword and cannot be used as a name", kw);
}
inline std::string expected_expression(std::string_view after, std::string_view found) {
  return fmt::format("expected an expression after '{}', found {}", after, found_text(found));
}
inline std::string expected_name(std::string_view after, std::string_view found) {
  return fmt::format("expected a name after '{}', found {}", after, found_text(found));
}
inline std::string expected_param(std::string_view found) {
  return fmt::format("expected a parameter name, found {}", found_text(found));
}
inline std::string expected_import(std::string_view found) {
  return fmt::format("expected a module name or a \"path\" after 'import', found {}",
                     found_text(found));
}
inline std::string expected_close(char close, std::string_view open_at, std::string_view found) {
  return fmt::format("expected ',' or '{}' to close the '{}' opened at {}, found {}", close,
                     close == ')' ? '(' : '[', open_at, found_text(found));
}
inline std::string unclosed_brace(std::string_view what, std::string_view open_at) {
  return fmt::format("expected '}}' to close {} (opened at {})", what, open_at);
}
inline std::string expected_body(std::string_view what, std::string_view found) {
  return fmt::format("expected '{{' to open the body of {}, found {}", what, found_text(found));
}
inline std::string expected_fn_body(std::string_view fn, std::string_view found) {
  return fmt::format("expected '= expression' or '{{' after the signature of function '{}', found {}",
                     fn, found_text(found));
}
inline std::string expected_fn_params(std::string_view fn) {
  return fmt::format("expected '(' and the parameters after the function name '{}'", fn);
}
inline std::string only_inside(std::string_view kw, std::string_view where) {
  return fmt::format("'{}' is only allowed {}", kw, where);
}
inline std::string nested_fn() {
  return "functions cannot be nested: 'fn' declares a function at the top level or in a "
         "module, optimizer or train block";
}
inline std::string expected_declaration(std::string_view found) {
  return fmt::format(
      "expected a declaration (import, dim, let, module, optimizer, fn or train), found {}",
      found_text(found));
}
inline std::string top_level_assignment(std::string_view name) {
  return fmt::format("a top-level value needs 'let' or 'dim': let {} = ...", name);
}
inline std::string module_body(std::string_view found) {
  return fmt::format("a module body holds param, member (name = value) and fn declarations, "
                     "found {}",
                     found_text(found));
}
inline std::string optimizer_body(std::string_view found) {
  return fmt::format("an optimizer body holds state, member (name = value) and fn "
                     "declarations, found {}",
                     found_text(found));
}
inline std::string train_body(std::string_view found) {
  return fmt::format("a train block holds member (name = value) and fn declarations, found {}",
                     found_text(found));
}
inline std::string expected_statement(std::string_view found) {
  return fmt::format("expected a statement, found {}", found_text(found));
}
inline std::string expected_end(std::string_view found) {
  return fmt::format("expected a newline or ';' before {}", found_text(found));
}
inline std::string bad_assignment_target() {
  return "only names can be assigned to: write name = value, or a, b = value";
}
inline std::string chained_comparison(std::string_view op) {
  return fmt::format("comparisons do not chain (as Python's a < b < c would): found a second "
                     "'{}'; parenthesize the comparison meant first",
                     op);
}
inline std::string chained_range() {
  return "ranges do not chain: a .. b .. c has no meaning";
}
inline std::string expected_type(std::string_view found) {
  return fmt::format("expected a type such as f32[B D], found {}", found_text(found));
}
inline std::string type_needs_brackets(std::string_view dtype) {
  return fmt::format("a type is written dtype[dims], e.g. {}[B D]: expected '[' after '{}'", dtype,
                     dtype);
}
inline std::string unclosed_type() {
  return "this '[' of a type is never closed (a type ends on its line)";
}
inline std::string unterminated_string() {
  return "unterminated string: this '\"' has no closing quote on its line";
}
inline std::string unknown_escape(std::string_view esc) {
  return fmt::format("unknown escape '{}' in a string (known: \\\" \\\\ \\n \\t)", esc);
}
inline std::string bad_number(std::string_view text) {
  return fmt::format("'{}' is not a number: write digits with an optional fraction and exponent "
                     "(2, 0.5, 1e-5), and separate a number from a name with an operator",
                     text);
}
inline std::string number_out_of_range(std::string_view text) {
  return fmt::format("the number {} is out of the range of a 64-bit float", text);
}
inline std::string expected_eq(std::string_view kw, std::string_view name) {
  return fmt::format("expected '=' and a value after '{} {}', e.g. {} {} = 64", kw, name, kw, name);
}
inline std::string param_needs_type(std::string_view name) {
  return fmt::format("param '{}' needs a type: param {}: f32[...]", name, name);
}
inline std::string expected_in(std::string_view var, std::string_view found) {
  return fmt::format("expected 'in' after the loop variable '{}', found {}", var,
                     found_text(found));
}
inline std::string expected_index(std::string_view found) {
  return fmt::format("expected an index, a slice a:b or '...', found {}", found_text(found));
}
inline std::string keyword_args_first() {
  return "keyword arguments must follow positional ones";
}
inline std::string too_deep(int limit) {
  return fmt::format("the script nests deeper than {} levels (brackets, operators, loops)", limit);
}
inline std::string expression_too_deep(uint32_t limit) {
  return fmt::format("the expression nests deeper than {} levels (each operator of a chain such "
                     "as a + b + c, each call and each subscript adds one): split it with "
                     "intermediate names",
                     limit);
}
inline std::string unexpected(std::string_view found) {
  return fmt::format("unexpected {}", found_text(found));
}


}  // namespace ein::messages::script
