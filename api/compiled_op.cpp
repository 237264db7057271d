// ein::compile: a pattern parsed and checked once, then applied through the cached ops. The op
// is chosen from the pattern: a reduction given → reduce; several inputs, or axes that vanish
// on the right with no reduction → einsum (sum over them, as einops.einsum); axes new on the
// right → repeat; otherwise rearrange.
#include <algorithm>
#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>

namespace ein {
namespace {

/// Names on one side, compositions flattened (numbers and `...` excluded).
std::vector<std::string> names(const PatternSide& side) {
  std::vector<std::string> out;
  for (const AxisTerm& term : side.terms)
    for (const AxisToken& tok : term.tokens)
      if (tok.kind == AxisToken::Kind::named) out.push_back(tok.name);
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

Op compile(std::string_view pattern, const Sizes& sizes, std::string_view reduction,
           std::optional<int64_t> ddof) {
  const Pattern p = parse_pattern(pattern);  // syntax errors surface here, with a caret
  if (!p.output)
    throw UserError("ein::compile needs a pattern with '->' (pack and unpack have their own "
                    "functions)",
                    p.source, p.inputs.front().range);
  Op op;
  op.pattern_ = std::string(pattern);
  op.sizes_ = sizes;
  op.reduction_ = std::string(reduction);
  op.ddof_ = ddof;
  const auto left = names(p.inputs.front()), right = names(*p.output);
  bool drops = false, adds = false;
  for (const auto& n : left) drops = drops || !contains(right, n);
  for (const auto& n : right) adds = adds || !contains(left, n);
  if (!reduction.empty())
    op.op_ = PatternOp::reduce;
  else if (p.inputs.size() > 1 || drops)
    op.op_ = PatternOp::einsum;
  else if (adds)
    op.op_ = PatternOp::repeat;
  else
    op.op_ = PatternOp::rearrange;
  return op;
}

Tensor Op::operator()(const Tensor& x) const {
  switch (op_) {
    case PatternOp::rearrange: return rearrange(x, pattern_, sizes_);
    case PatternOp::repeat: return repeat(x, pattern_, sizes_);
    case PatternOp::reduce: return reduce(x, pattern_, reduction_, sizes_, ddof_);
    default: return einsum(pattern_, std::vector<Tensor>{x});
  }
}

Tensor Op::operator()(const std::vector<Tensor>& xs) const {
  if (op_ == PatternOp::einsum) return einsum(pattern_, xs);
  if (xs.size() == 1) return (*this)(xs.front());
  if (op_ == PatternOp::rearrange) return rearrange(xs, pattern_, sizes_);
  throw RuntimeError(fmt::format("'{}' is a {} pattern and takes one tensor, got {}", pattern_,
                                 op_name(op_), xs.size()));
}

}  // namespace ein
