// Sema for the one-side patterns: pack ("i j * k": inputs joined along '*'), unpack (the
// inverse, given the packed shapes) and parse_shape ("batch _ h w": names bound to dims).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/sema/axis_table.h"
#include "compiler/sema/pattern_resolvers.h"
#include <ein/diagnostic.h>
#include "dsl/pattern_messages.h"

namespace ein::detail {
namespace {

// Checks the common shape of pack/unpack patterns and returns the '*' term index.
size_t check_pack_pattern(const Pattern& p, std::string_view op) {
  if (p.output) fail_at(p, messages::no_arrow_allowed(op), p.arrow);
  if (p.inputs.size() != 1) fail_at(p, messages::one_side_only(op), p.inputs[1].range);
  const PatternSide& side = p.inputs[0];
  validate_side(p, side, {.op = op, .star = true, .groups = false});
  size_t star = 0;
  for (size_t i = 0; i < side.terms.size(); ++i) {
    const AxisToken& tok = side.terms[i].tokens[0];
    if (tok.kind == AxisToken::Kind::star) star = i;
    if (tok.kind == AxisToken::Kind::number)
      fail_at(p, messages::number_not_allowed(op, tok.value), tok.range);
    if (tok.kind == AxisToken::Kind::ellipsis)
      fail_at(p, messages::ellipsis_in_pack(op), tok.range);
  }
  // einops splits pack patterns at spaces, so '*b' or 'a*' is one (invalid) axis name there.
  const SourceRange at = side.terms[star].range;
  const bool touches_before = star > 0 && side.terms[star - 1].range.end == at.begin;
  const bool touches_after = star + 1 < side.terms.size() && side.terms[star + 1].range.begin == at.end;
  if (touches_before || touches_after) {
    const SourceRange word = at.merge(touches_before ? side.terms[star - 1].range : at)
                                 .merge(touches_after ? side.terms[star + 1].range : at);
    fail_at(p, messages::star_not_alone(op), word);
  }
  return star;
}

std::string format_ps(const std::vector<std::vector<int64_t>>& ps) {
  std::vector<std::string> parts;
  for (const auto& s : ps)
    parts.push_back(fmt::format("[{}]", fmt::join(s, ",")));
  return fmt::format("[{}]", fmt::join(parts, ","));
}

}  // namespace

Recipe resolve_pack(const Pattern& p, const ResolveRequest& req) {
  const size_t star = check_pack_pattern(p, "pack");
  const PatternSide& side = p.inputs[0];
  if (req.shapes.empty()) throw UserError(messages::pack_no_inputs());
  const size_t after = side.terms.size() - star - 1;
  AxisTable table(p, req);
  Recipe recipe;
  recipe.op = PatternOp::pack;
  std::vector<size_t> first_tensor(side.terms.size(), 0);  // which tensor bound each axis
  int64_t packed_total = 0;
  for (size_t i = 0; i < req.shapes.size(); ++i) {
    const Shape& shape = req.shapes[i];
    if (shape.size() < star + after)
      table.fail(messages::pack_rank(i, format_shape(shape), star + after), side.range);
    recipe.input_groups.emplace_back();
    for (size_t t = 0; t < side.terms.size(); ++t) {
      if (t == star) {
        recipe.input_groups.back().push_back({});
        continue;
      }
      const size_t dim = t < star ? t : shape.size() - (side.terms.size() - t);
      const AxisToken& tok = side.terms[t].tokens[0];
      int id = table.find(tok.name);
      if (id < 0) {
        id = table.add(tok.name, ElementaryAxis::Origin::named, tok.range);
        first_tensor[t] = i;
      }
      if (table.size(id) && *table.size(id) != shape[dim] && i > 0)
        table.fail(
            messages::pack_mismatch(tok.name, i, shape[dim], first_tensor[t], *table.size(id)),
            tok.range);
      table.bind_dimension({id}, shape[dim], tok.range);
      recipe.input_groups.back().push_back({id});
    }
    Shape packed(shape.begin() + star, shape.end() - after);
    int64_t n = 1;
    for (int64_t d : packed)
      n = table.checked_product(n, d, side.terms[star].range);
    if (__builtin_add_overflow(packed_total, n, &packed_total))
      table.fail(messages::size_overflow(), side.terms[star].range);
    recipe.packed_shapes.push_back(std::move(packed));
  }
  table.check_all_given_used();
  Shape out;
  for (size_t t = 0; t < side.terms.size(); ++t)
    out.push_back(t == star ? packed_total : *table.size(table.find(side.terms[t].tokens[0].name)));
  recipe.output_shapes.push_back(std::move(out));
  recipe.axes = table.finish();
  return recipe;
}

Recipe resolve_unpack(const Pattern& p, const ResolveRequest& req) {
  const size_t star = check_pack_pattern(p, "unpack");
  const PatternSide& side = p.inputs[0];
  const SourceRange star_range = side.terms[star].range;
  if (req.shapes.empty()) fail_at(p, messages::missing_input("unpack"), side.range);
  if (req.shapes.size() != 1)
    fail_at(p, messages::too_many_inputs("unpack", req.shapes.size()), side.range);
  const Shape& shape = req.shapes[0];
  AxisTable table(p, req);
  if (shape.size() != side.terms.size())
    table.fail(messages::unpack_rank(format_shape(shape), side.terms.size()), side.range);
  if (req.packed.empty()) table.fail(messages::unpack_needs_ps(), star_range);
  for (size_t t = 0; t < side.terms.size(); ++t)
    if (t != star)
      table.bind_dimension(term_axes(table, side.terms[t], {}), shape[t], side.terms[t].range);
  table.check_all_given_used();

  // Infer the one -1 (if any) so the packed sizes add up to the '*' axis exactly.
  const std::string ps_text = format_ps(req.packed);
  const int64_t length = shape[star];
  std::vector<std::vector<int64_t>> packed = req.packed;
  std::vector<int64_t>* unknown_entry = nullptr;
  int64_t known_total = 0;
  int unknowns = 0;
  for (auto& entry : packed) {
    int64_t known = 1;
    bool has_unknown = false;
    for (int64_t v : entry) {
      if (v == -1) {
        ++unknowns;
        has_unknown = true;
      } else if (v < 0) {
        table.fail(messages::unpack_bad_size(v, ps_text), star_range);
      } else {
        known = table.checked_product(known, v, star_range);
      }
    }
    if (has_unknown)
      unknown_entry = &entry;
    else if (__builtin_add_overflow(known_total, known, &known_total))
      table.fail(messages::size_overflow(), star_range);
  }
  if (unknowns > 1) table.fail(messages::unpack_two_unknowns(ps_text), star_range);
  if (unknown_entry) {
    int64_t others = 1;
    for (int64_t v : *unknown_entry)
      if (v != -1) others = table.checked_product(others, v, star_range);
    const int64_t rest = length - known_total;
    if (rest < 0)
      table.fail(messages::unpack_split(
                     length, ps_text,
                     fmt::format("the other packed shapes already hold {} elements", known_total)),
                 star_range);
    if (others == 0)
      table.fail(messages::unpack_split(length, ps_text, "a -1 next to a 0 cannot be inferred"),
                 star_range);
    if (rest % others != 0)
      table.fail(
          messages::unpack_split(
              length, ps_text,
              fmt::format("the {} remaining elements are not divisible by {}", rest, others)),
          star_range);
    for (int64_t& v : *unknown_entry)
      if (v == -1) v = rest / others;
  } else if (known_total != length) {
    table.fail(messages::unpack_split_sum(length, ps_text, known_total), star_range);
  }

  Recipe recipe;
  recipe.op = PatternOp::unpack;
  recipe.packed_shapes = packed;
  for (const auto& entry : packed) {
    Shape out(shape.begin(), shape.begin() + star);
    out.insert(out.end(), entry.begin(), entry.end());
    out.insert(out.end(), shape.begin() + star + 1, shape.end());
    recipe.output_shapes.push_back(std::move(out));
  }
  recipe.axes = table.finish();
  return recipe;
}

Recipe resolve_parse_shape(const Pattern& p, const ResolveRequest& req) {
  constexpr std::string_view kOp = "parse_shape";
  if (p.output) fail_at(p, messages::no_arrow_allowed(kOp), p.arrow);
  if (p.inputs.size() != 1) fail_at(p, messages::one_side_only(kOp), p.inputs[1].range);
  const PatternSide& side = p.inputs[0];
  validate_side(p, side,
                {.op = kOp, .groups = false, .trivial_groups = true, .lone_underscore = true});
  if (req.shapes.empty()) fail_at(p, messages::missing_input(kOp), side.range);
  if (req.shapes.size() != 1)
    fail_at(p, messages::too_many_inputs(kOp, req.shapes.size()), side.range);
  const Shape& shape = req.shapes[0];
  AxisTable table(p, req);
  const int ell = ellipsis_term(side);
  const size_t fixed = side.terms.size() - (ell >= 0 ? 1 : 0);
  if (ell >= 0 ? shape.size() < fixed : shape.size() != fixed)
    table.fail(messages::rank_mismatch(fixed, ell >= 0, shape.size(), format_shape(shape)),
               side.range);

  Recipe recipe;
  recipe.op = PatternOp::parse_shape;
  size_t dim = 0;
  for (size_t t = 0; t < side.terms.size(); ++t) {
    const AxisTerm& term = side.terms[t];
    if (static_cast<int>(t) == ell) {
      dim += shape.size() - fixed;
      continue;
    }
    const int64_t length = shape[dim++];
    if (term.tokens.empty()) {  // `()`
      table.bind_dimension({}, length, term.range);
      continue;
    }
    const AxisToken& tok = term.tokens[0];
    if (tok.kind == AxisToken::Kind::named && tok.name == "_") continue;
    table.bind_dimension(term_axes(table, term, {}), length, term.range);
    if (tok.kind == AxisToken::Kind::named) recipe.parsed.emplace_back(tok.name, length);
  }
  table.check_all_given_used();
  recipe.output_shapes.push_back(shape);
  recipe.axes = table.finish();
  return recipe;
}

}  // namespace ein::detail

namespace ein {

std::string parse_expression(const Pattern& p) {
  constexpr std::string_view kOp = "an expression";
  if (p.output) detail::fail_at(p, messages::no_arrow_allowed(kOp), p.arrow);
  if (p.inputs.size() != 1) detail::fail_at(p, messages::one_side_only(kOp), p.inputs[1].range);
  const PatternSide& side = p.inputs[0];
  detail::validate_side(p, side, {.op = kOp, .ellipsis_in_group = true});
  std::vector<std::string> parts;
  for (const AxisTerm& term : side.terms) {
    if (!term.is_group && term.tokens[0].kind == AxisToken::Kind::ellipsis) {
      parts.emplace_back("...");
      continue;
    }
    std::vector<std::string> names;
    for (const AxisToken& tok : term.tokens) {
      if (tok.is_unit()) continue;  // `1` is a unit axis: nothing to compose
      names.push_back(tok.kind == AxisToken::Kind::named    ? tok.name
                      : tok.kind == AxisToken::Kind::number ? std::to_string(tok.value)
                                                            : "...");
    }
    parts.push_back(fmt::format("({})", fmt::join(names, " ")));
  }
  return fmt::format("[{}]", fmt::join(parts, " "));
}

}  // namespace ein
