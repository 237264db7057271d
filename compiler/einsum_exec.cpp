// einsum on tensors. Steps:
//   1. resolve the pattern (numpy semantics: `...`, size-1 broadcasting, compositions split);
//   2. view every operand on its elementary axes: a repeated axis (`i i`) becomes its diagonal
//      (one axis whose stride is the sum), a size-1 axis that broadcasts is dropped;
//   3. one operand: a sum over the axes the output lacks (one reduction kernel);
//      several: plan the pairwise order (contraction_plan, like opt_einsum) and run each step
//      through BLAS (runtime/blas), which folds permutes into transposes and leading dims;
//   4. permute the last result into output order and reshape (a view when possible).
#include <algorithm>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "compiler/contraction_plan.h"
#include "compiler/pattern_cache.h"
#include "compiler/tensor_kernels.h"
#include "runtime/blas/contract.h"

namespace ein {
namespace {

/// A tensor whose dims are labelled with elementary axis ids (no id twice).
struct Labelled {
  Tensor tensor;
  std::vector<int> ids;
};

Labelled label(const Recipe& r, const Tensor& x, size_t input) {
  std::vector<int> ids;
  Shape sizes, strides;
  const auto& groups = r.input_groups[input];
  for (size_t d = 0; d < groups.size(); ++d) {
    int64_t stride = x.stride(static_cast<int64_t>(d));
    const int64_t dim_size = x.size(static_cast<int64_t>(d));
    std::vector<std::pair<int, std::pair<int64_t, int64_t>>> dim;
    for (auto it = groups[d].rbegin(); it != groups[d].rend(); ++it) {
      // A dim of size 1 against an axis of size n broadcasts: its sub-axes have size 1 here.
      const int64_t size = dim_size == 1 ? 1 : r.axes[*it].size;
      dim.insert(dim.begin(), {*it, {size, stride}});
      stride *= size;
    }
    for (const auto& [id, ss] : dim) {
      const auto [size, s] = ss;
      if (size == 1 && r.axes[id].size != 1) continue;  // broadcast: the axis is absent here
      auto seen = std::find(ids.begin(), ids.end(), id);
      if (seen != ids.end()) {  // `i i`: the diagonal walks both strides at once
        strides[seen - ids.begin()] += s;
        continue;
      }
      ids.push_back(id);
      sizes.push_back(size);
      strides.push_back(s);
    }
  }
  return {x.as_strided(sizes, strides, x.offset()), ids};
}

/// `t` (labelled `ids`) summed over the axes not in `keep`, then permuted to `keep`'s order.
Tensor sum_to(const Labelled& t, const std::vector<int>& keep, const std::string& origin) {
  std::vector<bool> reduced;
  std::vector<int> kept_ids;
  for (int id : t.ids) {
    const bool gone = std::find(keep.begin(), keep.end(), id) == keep.end();
    reduced.push_back(gone);
    if (!gone) kept_ids.push_back(id);
  }
  std::vector<int64_t> perm;
  for (int id : keep)
    perm.push_back(std::find(kept_ids.begin(), kept_ids.end(), id) - kept_ids.begin());
  const bool any_reduced = std::find(reduced.begin(), reduced.end(), true) != reduced.end();
  if (!any_reduced) return t.tensor.permute(perm);
  std::vector<int> order(perm.begin(), perm.end());
  return reduce_dims(t.tensor, reduced, Reduction::sum, {}, order, origin).permute(perm);
}

}  // namespace

Tensor einsum(std::string_view pattern, const std::vector<Tensor>& operands) {
  if (operands.empty()) throw RuntimeError("einsum: no operands");
  ResolveRequest req;
  req.op = PatternOp::einsum;
  req.dtype = operands[0].dtype();
  for (const Tensor& x : operands) {
    if (!x.defined()) throw RuntimeError("einsum: an operand is undefined");
    if (x.device().kind != DeviceKind::cpu)
      throw RuntimeError(fmt::format("einsum: tensors on {} are not supported by this build",
                                     x.device().str()));
    if (x.dtype() != operands[0].dtype())
      throw RuntimeError(fmt::format("einsum: operands must share one dtype; got {} and {}",
                                     dtype_name(operands[0].dtype()), dtype_name(x.dtype())));
    req.shapes.push_back(x.shape());
  }
  const auto recipe = resolve_cached(pattern, req);
  const std::string origin(pattern);

  std::vector<int> out_ids;
  for (const auto& group : recipe->output_groups)
    for (int id : group)
      if (recipe->axes[id].size != 1) out_ids.push_back(id);
  // Output axes of size 1 live only in the final reshape.

  std::vector<Labelled> live;
  for (size_t i = 0; i < operands.size(); ++i) live.push_back(label(*recipe, operands[i], i));

  if (live.size() > 1) {
    std::vector<std::vector<int>> ids;
    for (const Labelled& l : live) ids.push_back(l.ids);
    std::vector<int64_t> sizes;
    for (const ElementaryAxis& a : recipe->axes) sizes.push_back(a.size);
    const ContractionPlan plan = plan_contraction(ids, out_ids, sizes);
    for (const ContractionStep& step : plan.steps) {
      Labelled a = live[step.lhs], b = live[step.rhs];
      live.erase(live.begin() + std::max(step.lhs, step.rhs));
      live.erase(live.begin() + std::min(step.lhs, step.rhs));
      live.push_back({contract(a.tensor, a.ids, b.tensor, b.ids, step.result_axes), step.result_axes});
    }
  }
  const Tensor result = sum_to(live.front(), out_ids, origin);
  const Shape& shape = recipe->output_shape();
  if (std::optional<Shape> strides = view_strides(result.shape(), result.strides(), shape))
    return result.as_strided(shape, *strides, result.offset());
  return materialize(result, origin).view(shape);
}

}  // namespace ein
