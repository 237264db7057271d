// ein::compile: a pattern parsed and checked once, then applied through the cached ops. The op
// is chosen from the pattern: a reduction given → reduce; several inputs, or axes that vanish
// on the right with no reduction → einsum (sum over them, as einops.einsum); axes new on the
// right → repeat; otherwise rearrange.
#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include <ein/diagnostic.h>
#include <ein/pattern_parser.h>

#include "compiler/graph/expression_graphs.h"

namespace ein {

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
  op.op_ = pattern_op_of(p, !reduction.empty());
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
