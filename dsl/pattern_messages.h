// Every user-facing message about einops patterns, from the parser and from sema, in one
// place so they can be reviewed together. Messages state the broken rule and the facts;
// locations and carets are added by UserError.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace ein::messages {

// ---- syntax (dsl/pattern_parser.cpp) -------------------------------------------------
inline std::string glued_token(std::string_view text) {
  return fmt::format(
      "'{}' is not an axis: names, numbers and '...' are separated by spaces, "
      "and a name starts with a letter",
      text);
}
inline std::string number_too_large(std::string_view text) {
  return fmt::format("axis length {} is too large", text);
}
inline std::string nested_group() {
  return "axis composition is one level: parentheses cannot nest";
}
inline std::string unclosed_group() {
  return "unbalanced parentheses: this '(' is never closed";
}
inline std::string unopened_group() {
  return "unbalanced parentheses: ')' without a matching '('";
}
inline std::string second_arrow() {
  return "a pattern has at most one '->'";
}
inline std::string comma_in_output() {
  return "the right side of '->' describes one tensor: commas only separate inputs";
}
inline std::string unexpected_character(std::string_view c) {
  if (c.empty()) return "unexpected end of pattern";
  return fmt::format(
      "unexpected character '{}' in a pattern (axes are names, numbers, '...', "
      "'(', ')', and ',' and '->' between sides)",
      c);
}

// ---- identifiers and structure (compiler/sema/axis_table.cpp) -------------------------------
inline std::string bad_identifier(std::string_view name) {
  return fmt::format(
      "'{}' is not a valid axis name: a name starts with a letter and does not "
      "start or end with '_'",
      name);
}
inline std::string duplicate_axis(std::string_view name) {
  return fmt::format(
      "axis '{}' appears twice on this side; every axis of a tensor has its own "
      "name",
      name);
}
inline std::string second_ellipsis() {
  return "a side may hold '...' only once";
}
inline std::string ellipsis_in_group(std::string_view op) {
  return fmt::format("'(...)' is allowed only on the right side of {}", op);
}
inline std::string star_not_allowed(std::string_view op) {
  return fmt::format("'*' belongs to pack and unpack patterns, not to {}", op);
}
inline std::string star_not_alone(std::string_view op) {
  return fmt::format("'*' stands alone in a {} pattern, with spaces around it (einops: "
                     "'*b' is not an axis name)",
                     op);
}
inline std::string star_count() {
  return "a pack/unpack pattern holds exactly one '*'";
}
inline std::string groups_not_allowed(std::string_view op) {
  return fmt::format("{} patterns cannot hold compositions '( )'", op);
}
inline std::string underscore_not_allowed(std::string_view op) {
  return fmt::format("'_' skips an axis only in parse_shape; {} needs a name here", op);
}
inline std::string number_not_allowed(std::string_view op, int64_t value) {
  return fmt::format("{} patterns name their axes; the number {} is not allowed", op, value);
}

// ---- sizes (compiler/sema/axis_table.cpp) -----------------------------------------------------
inline std::string rank_mismatch(size_t expected, bool at_least, size_t received,
                                 std::string_view shape) {
  return fmt::format("the pattern expects {}{} dimension{}, but the input has {} (shape {})",
                     at_least ? "at least " : "", expected, expected == 1 ? "" : "s", received,
                     shape);
}
inline std::string length_mismatch(std::string_view name, int64_t length, int64_t known) {
  return fmt::format("axis '{}' has length {} here, but length {} where it first appears", name,
                     length, known);
}
inline std::string given_mismatch(std::string_view name, int64_t length, int64_t given) {
  return fmt::format("axis '{}' has length {} in the input, but {}={} was given", name, length,
                     name, given);
}
inline std::string first_appears(std::string_view name, int64_t size) {
  return fmt::format("'{}' first appears here, with length {}", name, size);
}
inline std::string unit_mismatch(int64_t length) {
  return fmt::format("a unit axis must have length 1, but this dimension has length {}", length);
}
inline std::string anonymous_mismatch(int64_t value, int64_t length) {
  return fmt::format("anonymous axis {} must have length {}, but this dimension has length {}",
                     value, value, length);
}
inline std::string product_mismatch(std::string_view group, std::string_view known, int64_t product,
                                    int64_t length) {
  return fmt::format("cannot split an axis of length {} into {}{}{}: their product is {}, not {}",
                     length, group, known.empty() ? "" : " with ", known, product, length);
}
inline std::string not_divisible(std::string_view group, int64_t length, std::string_view known,
                                 int64_t product) {
  return fmt::format("cannot split an axis of length {} into {}{}{}: {} is not divisible by {}",
                     length, group, known.empty() ? "" : " with ", known, length, product);
}
inline std::string cannot_infer(std::string_view group, std::string_view unknown, int64_t length,
                                std::string_view first) {
  return fmt::format(
      "cannot infer the sizes of {} in {} from length {}: give all but one of "
      "them, e.g. {}=N",
      unknown, group, length, first);
}
inline std::string cannot_infer_zero(std::string_view group, std::string_view unknown) {
  return fmt::format("cannot infer {} in {}: the other axes have length 0", unknown, group);
}
inline std::string given_unused(std::string_view name) {
  return fmt::format("size {} was given, but the pattern has no axis '{}'", name, name);
}
inline std::string given_negative(std::string_view name, int64_t size) {
  return fmt::format("size {}={} is negative", name, size);
}

// ---- op rules (compiler/sema/pattern_sema.cpp, einsum_sema.cpp, pack.cpp) ---------------------
inline std::string needs_arrow(std::string_view op) {
  return fmt::format("{} needs '->' between the input and output sides", op);
}
inline std::string no_arrow_allowed(std::string_view op) {
  return fmt::format("{} patterns describe one tensor; '->' is not allowed", op);
}
inline std::string one_input_side(std::string_view op) {
  return fmt::format(
      "{} takes one input side; a list of tensors is stacked and described by "
      "one pattern",
      op);
}
inline std::string only_left(std::string_view op, std::string_view name) {
  return fmt::format(
      "'{}' appears only on the left side: {} keeps every axis (reduce removes "
      "axes)",
      name, op);
}
inline std::string only_right(std::string_view op, std::string_view name) {
  return fmt::format("'{}' appears only on the right side: {} cannot create axes (repeat does)",
                     name, op);
}
inline std::string repeat_drops(std::string_view name) {
  return fmt::format("'{}' appears only on the left side: repeat cannot remove axes (reduce does)",
                     name);
}
inline std::string anonymous_in_rearrange(int64_t value) {
  return fmt::format(
      "anonymous axis {} in rearrange: each number is a new distinct axis, and "
      "rearrange keeps every axis, so only 1 (a unit axis) is allowed; name it",
      value);
}
inline std::string anonymous_zero() {
  return "an anonymous axis has a positive length; name an empty axis instead (e.g. n, with n=0)";
}
inline std::string ellipsis_in_pack(std::string_view op) {
  return fmt::format("'...' is not allowed in {} patterns: '*' stands for the packed dimensions",
                     op);
}
inline std::string pack_mismatch(std::string_view name, size_t index, int64_t length, size_t first,
                                 int64_t first_length) {
  return fmt::format("axis '{}' has length {} in tensor {}, but length {} in tensor {}", name,
                     length, index, first_length, first);
}
inline std::string missing_input(std::string_view op) {
  return fmt::format("{} needs one input shape, but none was given", op);
}
inline std::string too_many_inputs(std::string_view op, size_t count) {
  return fmt::format(
      "{} takes one input, but {} shapes were given (a list input is stacked: "
      "mark it as a list)",
      op, count);
}
inline std::string size_overflow() {
  return "the sizes multiply beyond the largest tensor size (2^63 - 1 elements)";
}
inline std::string einsum_ellipsis_dropped(std::string_view shape) {
  return fmt::format(
      "the '...' dimensions {} are missing on the right side: einsum keeps '...' "
      "(name the axes to sum over them)",
      shape);
}
inline std::string anonymous_on_reduce_right(int64_t value) {
  return fmt::format(
      "anonymous axis {} on the right side of reduce: each number is a new "
      "distinct axis, and reduce cannot create axes (only 1 is allowed)",
      value);
}
inline std::string anonymous_on_repeat_left(int64_t value) {
  return fmt::format(
      "anonymous axis {} on the left side of repeat: each number is a distinct "
      "axis, so it would be dropped, and repeat cannot remove axes",
      value);
}
inline std::string ellipsis_right_only() {
  return "'...' appears on the right side but not on the left";
}
inline std::string ellipsis_left_only(std::string_view op) {
  return fmt::format("'...' appears on the left side but not on the right: {} keeps those axes",
                     op);
}
inline std::string repeat_needs_size(std::string_view name) {
  return fmt::format("new axis '{}' needs a size: give it as {}=N", name, name);
}
inline std::string reduce_needs_reduction() {
  return "reduce needs a reduction: min, max, sum, mean, prod, any, all, logsumexp, var, std";
}
inline std::string unknown_reduction(std::string_view name) {
  return fmt::format(
      "unknown reduction '{}'; expected one of min, max, sum, mean, prod, any, "
      "all, logsumexp, var, std",
      name);
}
inline std::string reduction_needs_float(std::string_view reduction, std::string_view dtype) {
  return fmt::format("{} needs a floating-point tensor, but the input is {}", reduction, dtype);
}
inline std::string reduction_of_empty(std::string_view reduction) {
  return fmt::format("{} over zero elements has no identity: a reduced axis here has length 0",
                     reduction);
}
inline std::string needs_ddof(std::string_view reduction) {
  return fmt::format(
      "{} needs an explicit ddof (numpy's default is 0, torch's is 1): write "
      "{}(ddof=1) or pass --ddof",
      reduction, reduction);
}
inline std::string ddof_too_large(std::string_view reduction, int64_t ddof, int64_t count) {
  return fmt::format("{} with ddof={} over {} element{} divides by zero or a negative count",
                     reduction, ddof, count, count == 1 ? "" : "s");
}
inline std::string list_shapes_differ(std::string_view first, std::string_view other,
                                      size_t index) {
  return fmt::format(
      "a list input is stacked, so all its tensors need one shape: tensor 0 has "
      "shape {}, tensor {} has shape {}",
      first, index, other);
}
inline std::string empty_list() {
  return "a list input needs at least one tensor";
}
inline std::string operand_count(std::string_view op, size_t sides, size_t tensors) {
  return fmt::format("{} pattern has {} input side{}, but {} tensor{} given", op, sides,
                     sides == 1 ? "" : "s", tensors, tensors == 1 ? " was" : "s were");
}

inline std::string einsum_unknown_output(std::string_view name) {
  return fmt::format(
      "'{}' on the right side of einsum appears in no input: einsum cannot create "
      "axes",
      name);
}
inline std::string anonymous_on_einsum_right(int64_t value) {
  return fmt::format(
      "anonymous axis {} on the right side of einsum: each number is a new "
      "distinct axis, and einsum cannot create axes (only 1 is allowed)",
      value);
}
inline std::string ellipsis_broadcast(std::string_view shape, std::string_view broadcast) {
  return fmt::format("the '...' dimensions {} do not broadcast with {} from the other inputs",
                     shape, broadcast);
}

inline std::string one_side_only(std::string_view op) {
  return fmt::format("{} patterns describe one tensor layout; ',' is not allowed", op);
}
inline std::string pack_rank(size_t index, std::string_view shape, size_t needed) {
  return fmt::format(
      "tensor {} has shape {}, but the pattern needs at least {} dimension{} "
      "around '*'",
      index, shape, needed, needed == 1 ? "" : "s");
}
inline std::string pack_no_inputs() {
  return "pack needs at least one tensor";
}
inline std::string unpack_rank(std::string_view shape, size_t expected) {
  return fmt::format(
      "the input has shape {}, but the pattern describes {} dimension{} ('*' is "
      "one)",
      shape, expected, expected == 1 ? "" : "s");
}
inline std::string unpack_needs_ps() {
  return "unpack needs the packed shapes (ps), as returned by pack: --ps '[[2],[1],[2]]'";
}
inline std::string unpack_two_unknowns(std::string_view ps) {
  return fmt::format("the packed shapes {} hold more than one -1: only one size can be inferred",
                     ps);
}
inline std::string unpack_bad_size(int64_t size, std::string_view ps) {
  return fmt::format(
      "the packed shapes {} hold the negative size {} (only -1, meaning "
      "'infer', is allowed)",
      ps, size);
}
inline std::string unpack_split(int64_t length, std::string_view ps, std::string_view why) {
  return fmt::format("cannot split the '*' axis of length {} into the packed shapes {}: {}", length,
                     ps, why);
}
inline std::string unpack_split_sum(int64_t length, std::string_view ps, int64_t total) {
  return fmt::format(
      "cannot split the '*' axis of length {} into the packed shapes {}: they "
      "hold {} elements",
      length, ps, total);
}

// ---- EinMix (compiler/sema/einmix_sema.cpp) -------------------------------------------
inline std::string einmix_weight_term() {
  return "EinMix's weight lists its axes by name, one by one: no parentheses or numbers";
}
inline std::string einmix_weight_ellipsis() {
  return "EinMix's weight cannot hold '...': the layer makes it before it sees an input, so "
         "every axis is named";
}
inline std::string einmix_anonymous(int64_t value) {
  return fmt::format(
      "anonymous axis {} in EinMix: the layer's axes are named (1 and '()' only as units)", value);
}
inline std::string einmix_ellipsis_one_side() {
  return "'...' in EinMix stands for the same dims of the input and the output: write it on "
         "both sides";
}
inline std::string einmix_unknown_output(std::string_view name) {
  return fmt::format(
      "output axis '{}' is neither in the input nor in the weight: EinMix cannot make it", name);
}
inline std::string einmix_weight_size(std::string_view name) {
  return fmt::format(
      "the size of weight axis '{}' is not given: EinMix makes its weight before it sees an "
      "input, so give {}=N",
      name, name);
}
inline std::string einmix_weight_overflow() {
  return "the weight's sizes overflow a 64-bit element count";
}
inline std::string einmix_unused_size(std::string_view name, int64_t size) {
  return fmt::format("size {}={} names no axis of EinMix's input or weight", name, size);
}
inline std::string einmix_redundant_weight(std::string_view name) {
  return fmt::format(
      "weight axis '{}' is neither in the input nor in the output: the weight would only be "
      "summed over it",
      name);
}
inline std::string einmix_bias_token() {
  return "EinMix's bias names output axes: no numbers, '...' or parentheses";
}
inline std::string einmix_bias_not_output(std::string_view name) {
  return fmt::format("bias axis '{}' is not an axis of the output", name);
}
inline std::string einmix_bias_size(std::string_view name) {
  return fmt::format(
      "the size of bias axis '{}' is not given: EinMix makes its bias before it sees an "
      "input, so give {}=N",
      name, name);
}
inline std::string einmix_bias_before_ellipsis(std::string_view name) {
  return fmt::format(
      "bias axis '{}' comes before '...' in the output: the bias broadcasts over the '...' "
      "dims from the right, so its axes must follow them",
      name);
}

}  // namespace ein::messages
