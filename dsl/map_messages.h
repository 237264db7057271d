// Every user-facing message of the map-expression front end (dsl/map_parser.cpp), in one
// place so they can be reviewed together. Messages state the broken rule and the facts;
// locations and carets are added by UserError. `found` is the offending token, already
// made printable; empty means the end of the text.
#pragma once

#include <fmt/format.h>

#include <cstdint>

#include <string>
#include <string_view>

namespace ein::messages::map {

/// How a found token reads in a message.
inline std::string found_text(std::string_view found) {
  if (found.empty()) return "the end of the text";
  return fmt::format("'{}'", found);
}

// ---- limits (dsl/limits.h) -----------------------------------------------------------
inline std::string too_deep(int limit) {
  return fmt::format("the map expression nests deeper than {} levels (parentheses, calls, "
                     "prefix '-' and '**' chains)",
                     limit);
}
inline std::string expression_too_deep(uint32_t limit) {
  return fmt::format("the map expression nests deeper than {} levels (each operator of a chain "
                     "such as a + b + c and each call adds one): split it into several maps",
                     limit);
}

// ---- inputs --------------------------------------------------------------------------
inline std::string expected_input(std::string_view found) {
  return fmt::format(
      "expected an input, written name[axes] (e.g. x[b s d], or s[] for a scalar), "
      "found {}",
      found_text(found));
}
inline std::string input_needs_brackets(std::string_view name) {
  return fmt::format("input '{}' needs its axes in brackets: {}[b s d], or {}[] for a scalar", name,
                     name, name);
}
inline std::string unclosed_bracket() {
  return "unbalanced brackets: this '[' is never closed";
}
inline std::string bad_axis(std::string_view found) {
  return fmt::format(
      "expected an axis name or ']', found {}: an input's axes are names separated by "
      "spaces (no numbers, compositions or '...')",
      found_text(found));
}
inline std::string duplicate_input(std::string_view name) {
  return fmt::format("input '{}' is declared twice; every input needs its own name", name);
}
inline std::string duplicate_axis(std::string_view axis, std::string_view input) {
  return fmt::format(
      "axis '{}' appears twice in input '{}': a map is elementwise, so every axis of an "
      "input has its own name",
      axis, input);
}
inline std::string first_declared(std::string_view name) {
  return fmt::format("'{}' first appears here", name);
}
inline std::string reserved_input_name() {
  return "'inf' is the number infinity in an expression; an input cannot be named 'inf'";
}
inline std::string missing_arrow(std::string_view found) {
  if (found.empty())
    return "a map expression needs '->' and an expression after its inputs, e.g. "
           "x[b d] -> x * 2";
  return fmt::format("expected ',' before another input, or '->' before the expression, found {}",
                     found_text(found));
}

// ---- expression ------------------------------------------------------------------------
inline std::string empty_expression() {
  return "the expression after '->' is empty";
}
inline std::string expected_operand(std::string_view found) {
  return fmt::format(
      "expected an operand (a number, an input name, a call f(...) or '('), found {}",
      found_text(found));
}
inline std::string bad_number(std::string_view text) {
  return fmt::format(
      "'{}' is not a number: write digits with an optional fraction and exponent "
      "(2, 0.5, 1e-5), and separate a number from a name with an operator",
      text);
}
inline std::string number_out_of_range(std::string_view text) {
  return fmt::format("the number {} is out of the range of a 64-bit float", text);
}
inline std::string unclosed_paren() {
  return "unbalanced parentheses: this '(' is never closed";
}
inline std::string unopened_paren() {
  return "unbalanced parentheses: ')' without a matching '('";
}
inline std::string chained_comparison(std::string_view op) {
  return fmt::format(
      "comparisons do not chain (as Python's a < b < c would): found a second '{}'; "
      "parenthesize the comparison meant first",
      op);
}
inline std::string missing_operator(std::string_view found) {
  return fmt::format("expected an operator before {}: two operands cannot stand side by side",
                     found_text(found));
}
inline std::string second_arrow() {
  return "a map expression has one '->', between the inputs and the expression";
}
inline std::string comma_in_expression() {
  return "the right side of '->' is one expression: commas separate inputs and call "
         "arguments only";
}
inline std::string caret_operator() {
  return "'^' is not an operator here; write '**' for a power (as in Python)";
}
inline std::string floor_division() {
  return "'//' (floor division) is not an operator of map expressions";
}
inline std::string single_equals() {
  return "'=' is not a comparison; write '==' to compare";
}
inline std::string indexing() {
  return "inputs are used by name alone in the expression: broadcasting is by axis name, "
         "so there is no indexing with '['";
}
inline std::string unexpected_character(std::string_view found) {
  return fmt::format("unexpected {} in a map expression", found_text(found));
}

}  // namespace ein::messages::map
