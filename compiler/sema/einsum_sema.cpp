// Sema for einsum: "b i d, b j d -> b i j". Axes with the same name are one axis across all
// operands (sizes must agree, or be 1 and broadcast, as in numpy and torch.einsum); a name
// repeated within an operand takes a diagonal; axes missing from the output are summed.
// '...' dims of all operands broadcast numpy-style and must appear on the output.
// Beyond einops (docs/patterns.md): compositions `(h d)` on either side, anonymous axes on
// the inputs (summed, being distinct), and unit axes `1`/`()` on either side.
#include <algorithm>

#include "compiler/sema/axis_table.h"
#include "compiler/sema/pattern_resolvers.h"
#include "dsl/pattern_messages.h"

namespace ein::detail {
namespace {

// The broadcast shape of every operand's '...' dims, right-aligned (numpy rules).
Shape broadcast_ellipsis(const AxisTable& table, const Pattern& p, const ResolveRequest& req) {
  Shape out;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const int ell = ellipsis_term(p.inputs[i]);
    if (ell < 0) continue;
    const Shape& shape = req.shapes[i];
    const size_t fixed = p.inputs[i].terms.size() - 1;
    if (shape.size() < fixed) continue;  // bind_side reports the rank error
    const Shape part(shape.begin() + ell, shape.begin() + ell + (shape.size() - fixed));
    const Shape before = out;
    if (part.size() > out.size()) out.insert(out.begin(), part.size() - out.size(), 1);
    for (size_t j = 0; j < part.size(); ++j) {
      int64_t& o = out[out.size() - part.size() + j];
      if (part[j] == o || part[j] == 1) continue;
      if (o != 1)
        table.fail(messages::ellipsis_broadcast(format_shape(part), format_shape(before)),
                   p.inputs[i].terms[ell].range);
      o = part[j];
    }
  }
  return out;
}

// A lone named axis of length 1 in one operand and n in another broadcasts: the length-1
// dim becomes a dropped unit (ids cleared), like a size-1 '...' dim. Not within one operand:
// a diagonal `i i` needs equal lengths, as in numpy.
void broadcast_unit_dims(const AxisTable& table, std::vector<std::vector<BoundDim>>& operands) {
  std::vector<int64_t> longest(table.count(), -1);
  for (const auto& dims : operands)
    for (const BoundDim& d : dims)
      if (d.ids.size() == 1 && !d.from_ellipsis)
        longest[d.ids[0]] = std::max(longest[d.ids[0]], d.length);
  for (auto& dims : operands) {
    std::vector<int> uses(table.count(), 0);
    for (const BoundDim& d : dims)
      if (d.ids.size() == 1) ++uses[d.ids[0]];
    for (BoundDim& d : dims) {
      if (d.ids.size() != 1 || d.from_ellipsis || d.length != 1 || uses[d.ids[0]] > 1) continue;
      if (longest[d.ids[0]] > 1 && table.axis(d.ids[0]).origin == ElementaryAxis::Origin::named)
        d.ids.clear();
    }
  }
}

}  // namespace

Recipe resolve_einsum(const Pattern& p, const ResolveRequest& req) {
  constexpr std::string_view kOp = "einsum";
  if (!p.output)
    fail_at(p, messages::needs_arrow(kOp), {0, static_cast<uint32_t>(p.source->text().size())});
  if (p.inputs.size() != req.shapes.size())
    fail_at(p, messages::operand_count(kOp, p.inputs.size(), req.shapes.size()),
            p.inputs.back().range);
  for (const PatternSide& side : p.inputs) {
    validate_side(p, side, {.op = kOp, .duplicates = true, .underscore_name = true});
  }
  const PatternSide& out_side = *p.output;
  validate_side(p, out_side, {.op = kOp, .ellipsis_in_group = true, .underscore_name = true});
  // '...' on the right with none on the left stands for no dimensions, as in numpy.

  AxisTable table(p, req);
  std::vector<int> ellipsis_ids;
  const Shape ell_shape = broadcast_ellipsis(table, p, req);
  for (size_t j = 0; j < ell_shape.size(); ++j)
    ellipsis_ids.push_back(table.add("\u2026" + std::to_string(j), ElementaryAxis::Origin::ellipsis,
                                     {}, ell_shape[j]));

  Recipe recipe;
  recipe.op = PatternOp::einsum;
  std::vector<std::vector<BoundDim>> operands;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    operands.push_back(bind_side(table, p.inputs[i], req.shapes[i], ellipsis_ids, /*bind=*/false));
  broadcast_unit_dims(table, operands);
  std::vector<BoundDim*> all;
  for (auto& dims : operands)
    for (auto& d : dims)
      all.push_back(&d);
  bind_dims(table, std::move(all));
  if (!ell_shape.empty() && !has_ellipsis(out_side))
    table.fail(messages::einsum_ellipsis_dropped(format_shape(ell_shape)), out_side.range);

  // The output may only name axes that some input has.
  std::vector<int> out_ids;
  for (const AxisTerm& term : out_side.terms) {
    for (const AxisToken& tok : term.tokens) {
      if (tok.kind == AxisToken::Kind::named && table.find(tok.name) < 0)
        fail_at(p, messages::einsum_unknown_output(tok.name), tok.range);
      if (tok.kind == AxisToken::Kind::number && !tok.is_unit())
        fail_at(p, messages::anonymous_on_einsum_right(tok.value), tok.range);
    }
    std::vector<int> ids = term_axes(table, term, ellipsis_ids);
    out_ids.insert(out_ids.end(), ids.begin(), ids.end());
    append_output_term(recipe.output_groups, term, std::move(ids));
  }
  table.check_all_given_used();

  for (const auto& dims : operands) {
    recipe.input_groups.emplace_back();
    for (const BoundDim& d : dims)
      recipe.input_groups.back().push_back(d.ids);
  }
  for (int id = 0; id < table.count(); ++id)
    if (std::find(out_ids.begin(), out_ids.end(), id) == out_ids.end())
      recipe.reduced_axes.push_back(id);
  Shape out;
  for (const auto& g : recipe.output_groups)
    out.push_back(table.group_size(g, out_side.range));
  check_numel(table, out, out_side.range);
  recipe.output_shapes.push_back(std::move(out));
  recipe.axes = table.finish();
  return recipe;
}

}  // namespace ein::detail
