// Sema for EinMix (einops.layers' EinMix): "b t (h c_in) -> b t (h c_out)" with the weight
// "h c_in c_out" and the bias "h c_out". The rules are einops' (layers/_einmix.py); the checks
// run in an order where each error can point at what the user wrote:
//   1. each text's syntax, and its tokens: the weight and the bias list names only; numbers
//      other than 1 nowhere; '...' on both sides of the pattern or on neither;
//   2. every output axis comes from the input or the weight;
//   3. every weight axis has a given size and reaches the input or the output (an axis of
//      neither would only be summed), every given size names an axis of the input or weight;
//   4. the bias' axes are output axes with given sizes, after the output's '...';
//   5. the plan: the einsum over elementary axes, the rearranges around it where a side
//      composes, the weight's and the bias' shapes and their initial bounds;
//   6. with an input shape, the output shape (the input bound as rearrange binds it).
#include <ein/patterns.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>
#include "compiler/sema/axis_table.h"
#include "dsl/pattern_messages.h"

namespace ein {
namespace {

using detail::fail_at;
using Kind = AxisToken::Kind;

constexpr std::string_view kOp = "EinMix";

bool names(const PatternSide& side, std::string_view name) {
  for (const AxisTerm& term : side.terms)
    for (const AxisToken& tok : term.tokens)
      if (tok.kind == Kind::named && tok.name == name) return true;
  return false;
}

// The side's axes with compositions opened and units dropped; '...' (also `(...)`) stays.
std::vector<std::string> elementary(const PatternSide& side) {
  std::vector<std::string> out;
  for (const AxisTerm& term : side.terms)
    for (const AxisToken& tok : term.tokens) {
      if (tok.kind == Kind::ellipsis) out.emplace_back("...");
      if (tok.kind == Kind::named) out.push_back(tok.name);
    }
  return out;
}

// Whether a rearrange must split (left) or make (right) the side's dims around the einsum:
// some term is other than one name or a lone '...' (a composition, a unit, `(...)`).
bool composes(const PatternSide& side) {
  return std::any_of(side.terms.begin(), side.terms.end(), [](const AxisTerm& term) {
    const bool one = term.tokens.size() == 1;
    if (term.is_group) return !(one && term.tokens[0].kind == Kind::named);
    return one && term.tokens[0].kind == Kind::number;
  });
}

// Parses the weight's or the bias' text: one side of names, under its own source name.
// Anything but a name (a composition, a number, '...') is `not_a_name`.
Pattern parse_axes(const std::string& text, const char* source_name, std::string_view what,
                   const std::string& not_a_name) {
  Pattern p = parse_pattern(make_source(source_name, text));
  if (p.output) fail_at(p, messages::no_arrow_allowed(what), p.arrow);
  if (p.inputs.size() != 1) fail_at(p, messages::one_side_only(what), p.inputs[1].range);
  for (const AxisTerm& term : p.inputs[0].terms)
    if (term.is_group || term.tokens[0].kind != Kind::named) fail_at(p, not_a_name, term.range);
  detail::validate_side(p, p.inputs[0], {.op = what});
  return p;
}

std::optional<int64_t> given(const EinMixRequest& req, std::string_view name) {
  for (const AxisSize& s : req.sizes)
    if (s.name == name) return s.size;
  return std::nullopt;
}

// Step 1 for the pattern: its sides, their numbers and their '...'.
void check_pattern(const Pattern& p) {
  if (!p.output)
    fail_at(p, messages::needs_arrow(kOp), {0, static_cast<uint32_t>(p.source->text().size())});
  if (p.inputs.size() != 1) fail_at(p, messages::one_input_side(kOp), p.inputs[1].range);
  const PatternSide& left = p.inputs[0];
  const PatternSide& right = *p.output;
  detail::validate_side(p, left, {.op = kOp});
  detail::validate_side(p, right, {.op = kOp, .ellipsis_in_group = true});
  for (const PatternSide* side : {&left, &right})
    for (const AxisTerm& term : side->terms)
      for (const AxisToken& tok : term.tokens)
        if (tok.kind == Kind::number && !tok.is_unit())
          fail_at(p, messages::einmix_anonymous(tok.value), tok.range);
  if (detail::has_ellipsis(left) != detail::has_ellipsis(right)) {
    const PatternSide& with = detail::has_ellipsis(left) ? left : right;
    for (const AxisTerm& term : with.terms)
      for (const AxisToken& tok : term.tokens)
        if (tok.kind == Kind::ellipsis) fail_at(p, messages::einmix_ellipsis_one_side(), tok.range);
  }
}

// Step 4's bias shape: per elementary output dim (no '...' dims: the bias broadcasts over
// them from the right), its size where the bias varies along it, else 1.
Shape bias_shape(const Pattern& p, const Pattern& bias, const EinMixRequest& req) {
  const PatternSide& side = bias.inputs[0];
  for (const AxisTerm& term : side.terms) {
    const AxisToken& tok = term.tokens[0];
    if (!names(*p.output, tok.name))
      fail_at(bias, messages::einmix_bias_not_output(tok.name), tok.range);
    if (!given(req, tok.name)) fail_at(bias, messages::einmix_bias_size(tok.name), tok.range);
  }
  Shape shape;
  const AxisToken* first_bias_axis = nullptr;
  for (const AxisTerm& term : p.output->terms)
    for (const AxisToken& tok : term.tokens) {
      if (tok.kind == Kind::ellipsis && first_bias_axis)
        fail_at(p, messages::einmix_bias_before_ellipsis(first_bias_axis->name),
                first_bias_axis->range);
      if (tok.kind != Kind::named) continue;
      const bool varies = names(side, tok.name);
      if (varies && !first_bias_axis) first_bias_axis = &tok;
      shape.push_back(varies ? *given(req, tok.name) : 1);
    }
  return shape;
}

// Step 6: the input bound to the left side, the output's dims from the bound and given sizes.
Shape output_shape(const Pattern& p, const EinMixRequest& req) {
  ResolveRequest bound;
  bound.op = PatternOp::rearrange;
  bound.shapes = {*req.input};
  bound.sizes = req.sizes;
  detail::AxisTable table(p, bound);
  std::vector<int> ellipsis_ids;
  for (const detail::BoundDim& d : detail::bind_side(table, p.inputs[0], *req.input, {}))
    if (d.from_ellipsis) ellipsis_ids.push_back(d.ids[0]);
  std::vector<std::vector<int>> groups;
  for (const AxisTerm& term : p.output->terms)
    detail::append_output_term(groups, term, detail::term_axes(table, term, ellipsis_ids));
  table.check_all_given_used();
  Shape out;
  for (const std::vector<int>& g : groups)
    out.push_back(table.group_size(g, p.output->range));
  detail::check_numel(table, out, p.output->range);
  return out;
}

std::string joined(const std::vector<std::string>& axes) {
  return fmt::format("{}", fmt::join(axes, " "));
}

}  // namespace

EinMixPlan resolve_einmix(const EinMixRequest& req) {
  // Step 1.
  const Pattern p = parse_pattern(req.pattern);
  check_pattern(p);
  const Pattern w =
      parse_axes(req.weight, "weight_shape", "EinMix's weight", messages::einmix_weight_term());
  const PatternSide& left = p.inputs[0];
  const PatternSide& right = *p.output;
  const PatternSide& weight = w.inputs[0];

  // Step 2.
  for (const AxisTerm& term : right.terms)
    for (const AxisToken& tok : term.tokens)
      if (tok.kind == Kind::named && !names(left, tok.name) && !names(weight, tok.name))
        fail_at(p, messages::einmix_unknown_output(tok.name), tok.range);

  // Step 3.
  EinMixPlan plan;
  int64_t numel = 1;
  for (const AxisTerm& term : weight.terms) {
    const AxisToken& tok = term.tokens[0];
    const std::optional<int64_t> size = given(req, tok.name);
    if (!size) fail_at(w, messages::einmix_weight_size(tok.name), tok.range);
    if (*size < 0) throw UserError(messages::given_negative(tok.name, *size));
    if (!names(left, tok.name) && !names(right, tok.name))
      fail_at(w, messages::einmix_redundant_weight(tok.name), tok.range);
    if (__builtin_mul_overflow(numel, *size, &numel) ||
        (!names(right, tok.name) && __builtin_mul_overflow(plan.fan_in, *size, &plan.fan_in)))
      fail_at(w, messages::einmix_weight_overflow(), weight.range);
    plan.weight_shape.push_back(*size);
  }
  for (const AxisSize& s : req.sizes) {
    if (s.size < 0) throw UserError(messages::given_negative(s.name, s.size));
    if (!names(left, s.name) && !names(weight, s.name))
      throw UserError(messages::einmix_unused_size(s.name, s.size));
  }

  // Step 4.
  if (req.bias) {
    const Pattern b =
        parse_axes(*req.bias, "bias_shape", "EinMix's bias", messages::einmix_bias_token());
    plan.bias_shape = bias_shape(p, b, req);
  }

  // Step 5.
  if (plan.fan_in > 0) {
    plan.weight_bound = std::sqrt(3.0 / static_cast<double>(plan.fan_in));
    plan.bias_bound = std::sqrt(1.0 / static_cast<double>(plan.fan_in));
  }
  const std::string flat_left = joined(elementary(left)), flat_right = joined(elementary(right));
  const std::string flat_weight = joined(elementary(weight));
  plan.einsum = fmt::format("{}, {}{}-> {}", flat_left, flat_weight, flat_weight.empty() ? "" : " ",
                            flat_right);
  if (composes(left)) {
    plan.pre = fmt::format("{} -> {}", p.source->slice(left.range), flat_left);
    for (const AxisSize& s : req.sizes)
      if (names(left, s.name)) plan.pre_sizes.push_back(s);
  }
  if (composes(right))
    plan.post = fmt::format("{} -> {}", flat_right, p.source->slice(right.range));

  // Step 6.
  if (req.input) plan.output = output_shape(p, req);
  return plan;
}

std::string format_einmix(const EinMixPlan& plan) {
  if (plan.output) return format_shape(*plan.output);
  const auto quoted = [](const std::optional<std::string>& s) {
    return s ? fmt::format("'{}'", *s) : std::string("None");
  };
  return fmt::format("weight={} bias={} fan_in={} einsum='{}' pre={} post={}",
                     format_shape(plan.weight_shape),
                     plan.bias_shape ? format_shape(*plan.bias_shape) : "None", plan.fan_in,
                     plan.einsum, quoted(plan.pre), quoted(plan.post));
}

}  // namespace ein
