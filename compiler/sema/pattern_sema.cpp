// Sema for rearrange, reduce and repeat (one input, or a list stacked into one), and the
// dispatch to einsum (einsum_sema.cpp) and pack/unpack/parse_shape (pack.cpp).
//
// Algorithm for one-input ops, as einops does it:
//   1. check each side's tokens against the op's rules (names, '...', '*', numbers);
//   2. check which identifiers may appear on one side only (rearrange: none; reduce: left
//      ones are reduced; repeat: right ones are new);
//   3. expand '...' to as many axes as the input has extra dimensions;
//   4. bind every input dimension to its term: a lone axis takes the length, a composition
//      infers at most one unknown factor; given sizes are verified;
//   5. build the output groups (new axes of repeat take given or anonymous sizes) and the
//      recipe: elementary split, reduced axes, permutation, added axes, output shape.
#include <ein/patterns.h>

#include <algorithm>

#include "compiler/sema/axis_table.h"
#include "compiler/sema/pattern_resolvers.h"
#include <ein/diagnostic.h>
#include "dsl/pattern_messages.h"

namespace ein {
namespace {

using detail::AxisTable;
using Origin = ElementaryAxis::Origin;

// Named identifiers and non-unit anonymous tokens of a side.
struct SideContents {
  std::vector<const AxisToken*> names;
  std::vector<const AxisToken*> anonymous;
  bool ellipsis = false;

  bool has(std::string_view name) const {
    return std::any_of(names.begin(), names.end(), [&](auto* t) { return t->name == name; });
  }
};

SideContents contents(const PatternSide& side) {
  SideContents c;
  for (const AxisTerm& term : side.terms)
    for (const AxisToken& tok : term.tokens) {
      if (tok.kind == AxisToken::Kind::named) c.names.push_back(&tok);
      if (tok.kind == AxisToken::Kind::number && !tok.is_unit()) c.anonymous.push_back(&tok);
      if (tok.kind == AxisToken::Kind::ellipsis) c.ellipsis = true;
    }
  return c;
}

// The range of the side's `...` token (the side's range if it has none).
SourceRange ellipsis_range(const PatternSide& side) {
  for (const AxisTerm& t : side.terms)
    for (const AxisToken& tok : t.tokens)
      if (tok.kind == AxisToken::Kind::ellipsis) return t.is_group ? t.range : tok.range;
  return side.range;
}

// Step 2: which identifiers may appear on one side only.
void check_identifier_sets(const Pattern& p, PatternOp op, const PatternSide& left,
                           const PatternSide& right) {
  const SideContents l = contents(left), r = contents(right);
  const std::string_view name = op_name(op);
  if (r.ellipsis && !l.ellipsis)
    detail::fail_at(p, messages::ellipsis_right_only(), ellipsis_range(right));
  if (op == PatternOp::rearrange) {
    for (auto* t : l.anonymous)
      detail::fail_at(p, messages::anonymous_in_rearrange(t->value), t->range);
    for (auto* t : r.anonymous)
      detail::fail_at(p, messages::anonymous_in_rearrange(t->value), t->range);
  }
  if (op == PatternOp::reduce)
    for (auto* t : r.anonymous)
      detail::fail_at(p, messages::anonymous_on_reduce_right(t->value), t->range);
  if (op == PatternOp::repeat)
    for (auto* t : l.anonymous)
      detail::fail_at(p, messages::anonymous_on_repeat_left(t->value), t->range);
  if (op != PatternOp::reduce) {
    for (auto* t : l.names)
      if (!r.has(t->name))
        detail::fail_at(p,
                        op == PatternOp::repeat ? messages::repeat_drops(t->name)
                                                : messages::only_left(name, t->name),
                        t->range);
    if (l.ellipsis && !r.ellipsis)
      detail::fail_at(p, messages::ellipsis_left_only(name), ellipsis_range(left));
  }
  if (op != PatternOp::repeat)
    for (auto* t : r.names)
      if (!l.has(t->name)) detail::fail_at(p, messages::only_right(name, t->name), t->range);
}

// The input shape, stacked when it is a list: (n, *shape).
Shape input_shape(const Pattern& p, const ResolveRequest& req) {
  const std::string_view name = op_name(req.op);
  const SourceRange left = p.inputs[0].range;
  if (!req.list_input) {
    if (req.shapes.empty()) detail::fail_at(p, messages::missing_input(name), left);
    if (req.shapes.size() != 1)
      detail::fail_at(p, messages::too_many_inputs(name, req.shapes.size()), left);
    return req.shapes[0];
  }
  if (req.shapes.empty()) detail::fail_at(p, messages::empty_list(), left);
  for (size_t i = 1; i < req.shapes.size(); ++i)
    if (req.shapes[i] != req.shapes[0])
      detail::fail_at(
          p,
          messages::list_shapes_differ(format_shape(req.shapes[0]), format_shape(req.shapes[i]), i),
          left);
  Shape stacked{static_cast<int64_t>(req.shapes.size())};
  stacked.insert(stacked.end(), req.shapes[0].begin(), req.shapes[0].end());
  return stacked;
}

void check_reduction(const Pattern& p, const ResolveRequest& req, const AxisTable& table,
                     const std::vector<int>& reduced) {
  const Reduction r = req.reduction;
  if (r == Reduction::none) detail::fail_at(p, messages::reduce_needs_reduction(), p.arrow);
  const std::string_view rname = reduction_name(r);
  const bool needs_float = r == Reduction::mean || r == Reduction::var || r == Reduction::std ||
                           r == Reduction::logsumexp;
  if (needs_float && !kFloatDTypes.contains(req.dtype))
    detail::fail_at(p, messages::reduction_needs_float(rname, dtype_name(req.dtype)),
                    p.inputs[0].range);
  int64_t count = 1;
  for (int id : reduced)
    count = table.checked_product(count, *table.size(id), p.arrow);
  if ((r == Reduction::min || r == Reduction::max) && count == 0 && !reduced.empty()) {
    for (int id : reduced)
      if (*table.size(id) == 0)
        table.fail(messages::reduction_of_empty(rname), table.axis(id).range);
  }
  if (r == Reduction::var || r == Reduction::std) {
    if (!req.ddof) detail::fail_at(p, messages::needs_ddof(rname), p.arrow);
    if (*req.ddof < 0 || count <= *req.ddof)  // ddof 0 over zero elements too: 0/0
      detail::fail_at(p, messages::ddof_too_large(rname, *req.ddof, count), p.arrow);
  }
}

Recipe resolve_one_input(const Pattern& p, const ResolveRequest& req) {
  const PatternOp op = req.op;
  const std::string_view name = op_name(op);
  if (!p.output)
    detail::fail_at(p, messages::needs_arrow(name),
                    {0, static_cast<uint32_t>(p.source->text().size())});
  if (p.inputs.size() != 1) detail::fail_at(p, messages::one_input_side(name), p.inputs[1].range);
  const PatternSide& left = p.inputs[0];
  const PatternSide& right = *p.output;
  detail::validate_side(p, left, {.op = name});
  detail::validate_side(p, right, {.op = name, .ellipsis_in_group = true});
  check_identifier_sets(p, op, left, right);

  const Shape shape = input_shape(p, req);
  AxisTable table(p, req);
  // Steps 3-4: register the left side's axes, then bind every dimension.
  const std::vector<detail::BoundDim> dims = detail::bind_side(table, left, shape, {});
  std::vector<int> ellipsis_ids;
  for (const auto& d : dims)
    if (d.from_ellipsis) ellipsis_ids.push_back(d.ids[0]);

  // Step 5: the output side.
  Recipe recipe;
  recipe.op = op;
  recipe.reduction = op == PatternOp::reduce ? req.reduction : Reduction::none;
  const size_t left_axes = static_cast<size_t>(table.count());
  for (const AxisTerm& term : right.terms) {
    std::vector<int> ids = detail::term_axes(table, term, ellipsis_ids);
    for (int id : ids)
      if (!table.size(id))
        table.fail(messages::repeat_needs_size(table.axis(id).name), table.axis(id).range);
    detail::append_output_term(recipe.output_groups, term, std::move(ids));
  }
  table.check_all_given_used();

  std::vector<int> out_ids;
  for (const auto& g : recipe.output_groups)
    out_ids.insert(out_ids.end(), g.begin(), g.end());
  recipe.input_groups.emplace_back();
  for (const auto& d : dims) {
    recipe.input_groups[0].push_back(d.ids);
    for (int id : d.ids) {
      recipe.elementary_axes.push_back(id);
      recipe.elementary_shape.push_back(*table.size(id));
    }
  }
  std::vector<int> kept;
  for (int id : recipe.elementary_axes) {
    if (std::find(out_ids.begin(), out_ids.end(), id) == out_ids.end())
      recipe.reduced_axes.push_back(id);
    else
      kept.push_back(id);
  }
  for (int id : out_ids) {
    const auto it = std::find(kept.begin(), kept.end(), id);
    if (it != kept.end())
      recipe.permutation.push_back(static_cast<int>(it - kept.begin()));
    else if (static_cast<size_t>(id) >= left_axes)
      recipe.added_axes.push_back(id);
  }
  if (op == PatternOp::reduce) check_reduction(p, req, table, recipe.reduced_axes);
  Shape out;
  for (const auto& g : recipe.output_groups)
    out.push_back(table.group_size(g, right.range));
  detail::check_numel(table, out, right.range);
  recipe.output_shapes.push_back(std::move(out));
  recipe.axes = table.finish();
  return recipe;
}

}  // namespace

Recipe resolve_pattern(const Pattern& pattern, const ResolveRequest& request) {
  switch (request.op) {
    case PatternOp::rearrange:
    case PatternOp::reduce:
    case PatternOp::repeat:
      return resolve_one_input(pattern, request);
    case PatternOp::einsum:
      return detail::resolve_einsum(pattern, request);
    case PatternOp::pack:
      return detail::resolve_pack(pattern, request);
    case PatternOp::unpack:
      return detail::resolve_unpack(pattern, request);
    case PatternOp::parse_shape:
      return detail::resolve_parse_shape(pattern, request);
  }
  throw UserError("unknown pattern op");
}

}  // namespace ein
