// Names of ops and reductions, and the text forms of a resolved recipe: the conformance
// result format that `ein shape` prints, and `explain()`, the step-by-step account.
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ein/patterns.h>

namespace ein {
namespace {

constexpr std::array<std::pair<PatternOp, std::string_view>, 7> kOps{{
    {PatternOp::rearrange, "rearrange"},
    {PatternOp::reduce, "reduce"},
    {PatternOp::repeat, "repeat"},
    {PatternOp::einsum, "einsum"},
    {PatternOp::pack, "pack"},
    {PatternOp::unpack, "unpack"},
    {PatternOp::parse_shape, "parse_shape"},
}};

constexpr std::array<std::pair<Reduction, std::string_view>, 10> kReductions{{
    {Reduction::min, "min"},
    {Reduction::max, "max"},
    {Reduction::sum, "sum"},
    {Reduction::mean, "mean"},
    {Reduction::prod, "prod"},
    {Reduction::any, "any"},
    {Reduction::all, "all"},
    {Reduction::logsumexp, "logsumexp"},
    {Reduction::var, "var"},
    {Reduction::std, "std"},
}};

std::string axis_list(const Recipe& r, const std::vector<int>& ids) {
  std::vector<std::string> names;
  for (int id : ids)
    names.push_back(fmt::format("{}={}", r.axes[id].name, r.axes[id].size));
  return fmt::format("{}", fmt::join(names, " "));
}

std::string group_list(const Recipe& r, const std::vector<std::vector<int>>& groups) {
  std::vector<std::string> parts;
  for (const auto& g : groups) {
    std::vector<std::string> names;
    for (int id : g)
      names.push_back(r.axes[id].name);
    parts.push_back(g.size() == 1 ? names[0] : fmt::format("({})", fmt::join(names, " ")));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace

std::optional<PatternOp> parse_pattern_op(std::string_view name) {
  for (const auto& [op, n] : kOps)
    if (n == name) return op;
  return std::nullopt;
}

std::string_view op_name(PatternOp op) {
  for (const auto& [o, n] : kOps)
    if (o == op) return n;
  return "?";
}

std::optional<Reduction> parse_reduction(std::string_view name) {
  for (const auto& [r, n] : kReductions)
    if (n == name) return r;
  return std::nullopt;
}

std::string_view reduction_name(Reduction r) {
  for (const auto& [x, n] : kReductions)
    if (x == r) return n;
  return "none";
}

std::string format_shape(std::span<const int64_t> shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ","));
}

std::string format_result(const Recipe& r) {
  switch (r.op) {
    case PatternOp::pack: {
      std::vector<std::string> ps;
      for (const Shape& s : r.packed_shapes)
        ps.push_back(format_shape(s));
      return fmt::format("{} ps=[{}]", format_shape(r.output_shape()), fmt::join(ps, ";"));
    }
    case PatternOp::unpack: {
      std::vector<std::string> outs;
      for (const Shape& s : r.output_shapes)
        outs.push_back(format_shape(s));
      return fmt::format("[{}]", fmt::join(outs, ";"));
    }
    case PatternOp::parse_shape: {
      std::vector<std::string> parts;
      for (const auto& [name, size] : r.parsed)
        parts.push_back(fmt::format("{}:{}", name, size));
      return fmt::format("{{{}}}", fmt::join(parts, ","));
    }
    default:
      return format_shape(r.output_shape());
  }
}

std::string explain(const Recipe& r) {
  std::string out = fmt::format(
      "op: {}{}\n", op_name(r.op),
      r.op == PatternOp::reduce ? fmt::format(" ({})", reduction_name(r.reduction)) : "");
  std::vector<int> all;
  for (size_t i = 0; i < r.axes.size(); ++i)
    all.push_back(static_cast<int>(i));
  out += fmt::format("elementary axes: {}\n", axis_list(r, all));
  const bool one_side =
      r.op == PatternOp::pack || r.op == PatternOp::unpack || r.op == PatternOp::parse_shape;
  if (one_side) {  // no split/permute plan: the axes and the result say it all
    for (size_t i = 0; i < r.packed_shapes.size(); ++i)
      out += fmt::format("packed {}: {}\n", i, format_shape(r.packed_shapes[i]));
    return out + fmt::format("result: {}\n", format_result(r));
  }
  for (size_t i = 0; i < r.input_groups.size(); ++i)
    out += fmt::format("input {}: {}\n", i, group_list(r, r.input_groups[i]));
  if (!r.elementary_shape.empty() || r.op == PatternOp::rearrange || r.op == PatternOp::reduce ||
      r.op == PatternOp::repeat) {
    out += fmt::format("split: {} -> {}\n", group_list(r, r.input_groups[0]),
                       format_shape(r.elementary_shape));
    if (!r.reduced_axes.empty()) out += fmt::format("reduce: {}\n", axis_list(r, r.reduced_axes));
    out += fmt::format("permute: [{}]\n", fmt::join(r.permutation, ","));
    if (!r.added_axes.empty()) out += fmt::format("add: {}\n", axis_list(r, r.added_axes));
  } else if (r.op == PatternOp::einsum && !r.reduced_axes.empty()) {
    out += fmt::format("sum over: {}\n", axis_list(r, r.reduced_axes));
  }
  if (!r.output_groups.empty()) out += fmt::format("output: {}\n", group_list(r, r.output_groups));
  out += fmt::format("result: {}\n", format_result(r));
  return out;
}

}  // namespace ein
