// rearrange, reduce, repeat, pack and unpack on tensors, and ein::compile. Each op resolves its
// pattern (cached sema: the same checks and carets as `ein shape`), views the input on its
// elementary axes (splitting a dim is always a view), and then:
//   rearrange  permutes that view; merging the output groups is a view when the strides allow,
//              else one copy kernel into a contiguous result;
//   repeat     the same with stride-0 dims for the new axes (a broadcast view when possible);
//   reduce     one reduction kernel (two for logsumexp/var/std) writing the kept axes directly
//              in output order, so the final reshape is always a view;
//   pack       one copy kernel per input into its slice of the result; unpack returns views.
#include <algorithm>
#include <numeric>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "compiler/pattern_cache.h"
#include "compiler/tensor_kernels.h"
#include "dsl/pattern_parser.h"

namespace ein {
namespace {

/// One elementary axis of a tensor view.
struct AxisView {
  int id = -1;
  int64_t size = 1;
  int64_t stride = 0;
};

void check_input(const Tensor& x, std::string_view op) {
  if (!x.defined()) throw RuntimeError(fmt::format("{}: the input tensor is undefined", op));
  if (x.device().kind != DeviceKind::cpu)
    throw RuntimeError(fmt::format("{}: tensors on {} are not supported by this build; move the "
                                   "input to the CPU with .to(ein::cpu())",
                                   op, x.device().str()));
}

ResolveRequest request_for(PatternOp op, const Tensor& x, const Sizes& sizes) {
  ResolveRequest req;
  req.op = op;
  req.dtype = x.dtype();
  req.shapes = {x.shape()};
  req.sizes = sizes;
  return req;
}

/// `x` split into the elementary axes of input `input`, in input order.
std::vector<AxisView> elementary_axes(const Recipe& r, const Tensor& x, size_t input) {
  std::vector<AxisView> out;
  const auto& groups = r.input_groups[input];
  for (size_t d = 0; d < groups.size(); ++d) {
    int64_t stride = x.stride(static_cast<int64_t>(d));
    std::vector<AxisView> dim;
    for (auto it = groups[d].rbegin(); it != groups[d].rend(); ++it) {
      const int64_t size = r.axes[*it].size;
      dim.insert(dim.begin(), AxisView{*it, size, stride});
      stride *= size;
    }
    out.insert(out.end(), dim.begin(), dim.end());
  }
  return out;
}

/// The output's elementary axes in output order: input axes keep their strides, new axes
/// (repeat) get stride 0; size-1 axes new to the output are dropped (the reshape adds them).
std::vector<AxisView> output_axes(const Recipe& r, const std::vector<AxisView>& in) {
  std::vector<AxisView> out;
  for (const auto& group : r.output_groups)
    for (int id : group) {
      auto it = std::find_if(in.begin(), in.end(), [&](const AxisView& a) { return a.id == id; });
      if (it != in.end())
        out.push_back(*it);
      else if (r.axes[id].size != 1)
        out.push_back({id, r.axes[id].size, 0});
    }
  return out;
}

/// The view `axes` of `base`, reshaped to `shape`: a view when possible, else a copy.
Tensor finish(const Tensor& base, const std::vector<AxisView>& axes, const Shape& shape,
              std::string_view pattern) {
  Shape sizes, strides;
  for (const AxisView& a : axes) {
    sizes.push_back(a.size);
    strides.push_back(a.stride);
  }
  const Tensor view = base.as_strided(sizes, strides, base.offset());
  if (std::optional<Shape> merged = view_strides(sizes, strides, shape))
    return base.as_strided(shape, *merged, base.offset());
  Tensor out = empty(shape, base.dtype(), cpu());
  copy_into(out.as_strided(sizes, contiguous_strides(sizes), 0), view, std::string(pattern));
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, std::string_view op) {
  if (xs.empty()) throw RuntimeError(fmt::format("{}: the list of tensors is empty", op));
  for (const Tensor& x : xs) check_input(x, op);
  for (size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape() != xs[0].shape() || xs[i].dtype() != xs[0].dtype())
      throw RuntimeError(fmt::format("{}: list element {} is {} {}, but element 0 is {} {}", op, i,
                                     dtype_name(xs[i].dtype()), shape_str(xs[i].shape()),
                                     dtype_name(xs[0].dtype()), shape_str(xs[0].shape())));
  Shape shape = xs[0].shape();
  shape.insert(shape.begin(), static_cast<int64_t>(xs.size()));
  Tensor out = empty(shape, xs[0].dtype(), cpu());
  for (size_t i = 0; i < xs.size(); ++i) copy_into(out.select(0, static_cast<int64_t>(i)), xs[i]);
  return out;
}

Tensor apply_layout(const Tensor& x, std::string_view pattern, const Sizes& sizes, PatternOp op) {
  check_input(x, op_name(op));
  const auto recipe = resolve_cached(pattern, request_for(op, x, sizes));
  const auto in = elementary_axes(*recipe, x, 0);
  return finish(x, output_axes(*recipe, in), recipe->output_shape(), pattern);
}

size_t star_position(std::string_view pattern) {
  const Pattern p = parse_pattern(pattern);
  for (size_t i = 0; i < p.inputs[0].terms.size(); ++i)
    if (!p.inputs[0].terms[i].tokens.empty() &&
        p.inputs[0].terms[i].tokens[0].kind == AxisToken::Kind::star)
      return i;
  return 0;  // sema has already rejected a pattern without '*'
}

}  // namespace

Tensor rearrange(const Tensor& x, std::string_view pattern, const Sizes& sizes) {
  return apply_layout(x, pattern, sizes, PatternOp::rearrange);
}

Tensor rearrange(const std::vector<Tensor>& xs, std::string_view pattern, const Sizes& sizes) {
  return rearrange(stack(xs, "rearrange"), pattern, sizes);
}

Tensor repeat(const Tensor& x, std::string_view pattern, const Sizes& sizes) {
  return apply_layout(x, pattern, sizes, PatternOp::repeat);
}

Tensor reduce(const Tensor& x, std::string_view pattern, std::string_view reduction,
              const Sizes& sizes, std::optional<int64_t> ddof) {
  check_input(x, "reduce");
  const std::optional<Reduction> r = parse_reduction(reduction);
  if (!r || *r == Reduction::none)
    throw RuntimeError(fmt::format("reduce: unknown reduction '{}'; expected one of min, max, sum, "
                                   "mean, prod, any, all, logsumexp, var, std",
                                   reduction));
  ResolveRequest req = request_for(PatternOp::reduce, x, sizes);
  req.reduction = *r;
  req.ddof = ddof;
  const auto recipe = resolve_cached(pattern, req);
  const auto in = elementary_axes(*recipe, x, 0);
  Shape sizes_el, strides_el;
  std::vector<bool> reduced;
  std::vector<int> kept_ids;
  for (const AxisView& a : in) {
    sizes_el.push_back(a.size);
    strides_el.push_back(a.stride);
    const bool gone = std::find(recipe->reduced_axes.begin(), recipe->reduced_axes.end(), a.id) !=
                      recipe->reduced_axes.end();
    reduced.push_back(gone);
    if (!gone) kept_ids.push_back(a.id);
  }
  // out_order[i]: which kept axis (in input order) is the i-th kept axis of the output.
  std::vector<int> out_order;
  for (const auto& group : recipe->output_groups)
    for (int id : group) {
      auto it = std::find(kept_ids.begin(), kept_ids.end(), id);
      if (it != kept_ids.end()) out_order.push_back(static_cast<int>(it - kept_ids.begin()));
    }
  const Tensor el = x.as_strided(sizes_el, strides_el, x.offset());
  const Tensor kept = reduce_dims(el, reduced, *r, ddof, out_order, std::string(pattern));
  std::vector<int64_t> perm(out_order.begin(), out_order.end());
  return kept.permute(perm).view(recipe->output_shape());
}

std::pair<Tensor, std::vector<Shape>> pack(const std::vector<Tensor>& xs, std::string_view pattern) {
  ResolveRequest req;
  req.op = PatternOp::pack;
  for (const Tensor& x : xs) {
    check_input(x, "pack");
    req.shapes.push_back(x.shape());
  }
  if (xs.empty()) throw RuntimeError("pack: the list of tensors is empty");
  req.dtype = xs[0].dtype();
  for (const Tensor& x : xs)
    if (x.dtype() != xs[0].dtype())
      throw RuntimeError(fmt::format("pack: every input must have one dtype; got {} and {}",
                                     dtype_name(xs[0].dtype()), dtype_name(x.dtype())));
  const auto recipe = resolve_cached(pattern, req);
  const size_t star = star_position(pattern);
  Tensor out = empty(recipe->output_shape(), xs[0].dtype(), cpu());
  int64_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Shape& ps = recipe->packed_shapes[i];
    const int64_t n = std::accumulate(ps.begin(), ps.end(), int64_t{1}, std::multiplies<>());
    Tensor slot = out.slice(static_cast<int64_t>(star), at, at + n);
    Shape view_shape(slot.shape().begin(), slot.shape().begin() + static_cast<int64_t>(star));
    view_shape.insert(view_shape.end(), ps.begin(), ps.end());
    view_shape.insert(view_shape.end(), slot.shape().begin() + static_cast<int64_t>(star) + 1,
                      slot.shape().end());
    copy_into(slot.view(view_shape), xs[i], std::string(pattern));
    at += n;
  }
  return {out, recipe->packed_shapes};
}

std::vector<Tensor> unpack(const Tensor& x, const std::vector<Shape>& packed_shapes,
                           std::string_view pattern) {
  check_input(x, "unpack");
  ResolveRequest req = request_for(PatternOp::unpack, x, {});
  req.packed = packed_shapes;
  const auto recipe = resolve_cached(pattern, req);
  const size_t star = star_position(pattern);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const Shape& shape : recipe->output_shapes) {
    const size_t after = static_cast<size_t>(x.dim()) - star - 1;
    int64_t n = 1;
    for (size_t d = star; d < shape.size() - after; ++d) n *= shape[d];
    out.push_back(x.slice(static_cast<int64_t>(star), at, at + n).view(shape));
    at += n;
  }
  return out;
}

void synchronize() {}

}  // namespace ein
