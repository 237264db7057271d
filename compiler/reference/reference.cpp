// The reference interpreter's pattern ops (rearrange, reduce, repeat, einsum, pack, unpack)
// and the Array helpers. Each op resolves its pattern with sema and then, for every output
// element, reads the input elements it depends on by plain index arithmetic; nothing is
// planned, fused or vectorised. Elementwise ops live in reference_elementwise.cpp.
#include "compiler/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <ein/errors.h>

#include <ein/pattern_cache.h>
#include <ein/pattern_parser.h>

namespace ein::reference {
namespace {

// The value of every elementary axis at one point of the iteration, indexed by axis id.
using AxisValues = std::vector<int64_t>;

ResolveRequest make_request(PatternOp op, std::vector<Shape> shapes,
                            const std::vector<AxisSize>& sizes) {
  ResolveRequest request;
  request.op = op;
  request.dtype = DType::f64;
  request.shapes = std::move(shapes);
  request.sizes = sizes;
  return request;
}

std::vector<Shape> shapes_of(const std::vector<Array>& xs) {
  std::vector<Shape> shapes;
  for (const Array& x : xs)
    shapes.push_back(x.shape);
  return shapes;
}

// The index along one dimension composed of `group`, in C order (first axis outermost).
// An empty group is a unit dimension (or one that broadcasts): index 0.
int64_t compose(const std::vector<int>& group, const Recipe& recipe, const AxisValues& values) {
  int64_t index = 0;
  for (int id : group)
    index = index * recipe.axes[id].size + values[id];
  return index;
}

// The inverse of compose(): sets the values of `group`'s axes from one dimension's index.
void decompose(const std::vector<int>& group, const Recipe& recipe, int64_t index,
               AxisValues& values) {
  for (auto it = group.rbegin(); it != group.rend(); ++it) {
    values[*it] = index % recipe.axes[*it].size;
    index /= recipe.axes[*it].size;
  }
}

// Row-major offset of the element of `x` (whose dims are `groups`) at the axis values.
int64_t offset_of(const Array& x, const std::vector<std::vector<int>>& groups, const Recipe& recipe,
                  const AxisValues& values) {
  // Array::offset's arithmetic and checks, without building an index vector: this is the
  // oracle's innermost loop.
  if (groups.size() != x.shape.size()) return x.offset({});  // throws the rank message
  int64_t off = 0;
  for (size_t d = 0; d < groups.size(); ++d) {
    const int64_t i = compose(groups[d], recipe, values);
    if (i < 0 || i >= x.shape[d]) {
      std::vector<int64_t> index;
      for (const auto& group : groups) index.push_back(compose(group, recipe, values));
      return x.offset(index);  // throws the out-of-range message
    }
    off = off * x.shape[d] + i;
  }
  return off;
}

// Calls `visit(values)` once per combination of the axes `ids` (row-major over them), with
// the other entries of `values` left as they are. Zero times when one axis has length 0.
template <typename Visit>
void for_each_combination(const std::vector<int>& ids, const Recipe& recipe, AxisValues& values,
                          Visit&& visit) {
  Shape sizes;
  for (int id : ids)
    sizes.push_back(recipe.axes[id].size);
  if (numel(sizes) == 0) return;
  std::vector<int64_t> index(ids.size(), 0);
  do {
    for (size_t k = 0; k < ids.size(); ++k)
      values[ids[k]] = index[k];
    visit(values);
  } while (next_index(index, sizes));
}

// Calls `visit(out_offset, values)` for every element of the recipe's (first) output, with
// the values of the output's axes set from the output index.
template <typename Visit>
void for_each_output(const Recipe& recipe, AxisValues& values, Visit&& visit) {
  const Shape& shape = recipe.output_shape();
  if (numel(shape) == 0) return;
  std::vector<int64_t> index(shape.size(), 0);
  int64_t out = 0;
  do {
    for (size_t d = 0; d < shape.size(); ++d)
      decompose(recipe.output_groups[d], recipe, index[d], values);
    visit(out++, values);
  } while (next_index(index, shape));
}

// Combines the elements of one reduction; the definitions are numpy's and PyTorch's.
double reduce_values(Reduction r, const std::vector<double>& v, std::optional<int64_t> ddof) {
  const double n = static_cast<double>(v.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto maximum = [&] {  // NaN propagates, as in torch.max and numpy.max; -0 < +0
    double m = -inf;
    for (double x : v)
      m = std::isnan(x) || std::isnan(m) ? nan : (x > m || (x == m && !std::signbit(x)) ? x : m);
    return m;
  };
  auto sum = [&] {
    double s = 0;
    for (double x : v)
      s += x;
    return s;
  };
  switch (r) {
    case Reduction::none:  // rearrange/repeat: exactly one element feeds each output
      if (v.size() != 1) throw RuntimeError("reference: a non-reducing recipe read several values");
      return v[0];
    case Reduction::sum:
      return sum();
    case Reduction::mean:
      return sum() / n;  // 0/0 = NaN over zero elements, as numpy and torch
    case Reduction::prod: {
      double p = 1;
      for (double x : v)
        p *= x;
      return p;
    }
    case Reduction::min:
    case Reduction::max: {
      if (v.empty()) throw RuntimeError("cannot reduce over a zero-size dimension with min or max");
      if (r == Reduction::max) return maximum();
      double m = inf;
      for (double x : v)
        m = std::isnan(x) || std::isnan(m) ? nan : std::min(m, x);
      return m;
    }
    case Reduction::any:
      return std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1 : 0;
    case Reduction::all:
      return std::all_of(v.begin(), v.end(), [](double x) { return x != 0; }) ? 1 : 0;
    case Reduction::logsumexp: {
      // Stable form max + log(sum(exp(x - max))); an infinite max is the answer itself
      // (all -inf gives -inf, as torch.logsumexp; +inf gives +inf), and so is zero elements.
      if (v.empty()) return -inf;
      const double m = maximum();
      if (std::isinf(m)) return m;
      double s = 0;
      for (double x : v)
        s += std::exp(x - m);
      return m + std::log(s);
    }
    case Reduction::var:
    case Reduction::std: {
      // numpy.var / torch.var: sum((x - mean)^2) / (n - ddof).
      const double mean = sum() / n;
      double squares = 0;
      for (double x : v)
        squares += (x - mean) * (x - mean);
      const double var = squares / (n - static_cast<double>(ddof.value_or(0)));
      return r == Reduction::var ? var : std::sqrt(var);
    }
  }
  throw RuntimeError("reference: unknown reduction");
}

// rearrange/reduce/repeat on one (already stacked) input: for each output element, gather
// the input elements over the reduced axes and combine them.
Array apply_one_input(const Recipe& recipe, const Array& x, std::optional<int64_t> ddof) {
  Array out = Array::filled(recipe.output_shape(), 0.0);
  AxisValues values(recipe.axes.size(), 0);
  std::vector<double> gathered;
  for_each_output(recipe, values, [&](int64_t o, AxisValues& v) {
    gathered.clear();
    for_each_combination(recipe.reduced_axes, recipe, v, [&](const AxisValues& w) {
      gathered.push_back(x.data[offset_of(x, recipe.input_groups[0], recipe, w)]);
    });
    out.data[o] = reduce_values(recipe.reduction, gathered, ddof);
  });
  return out;
}

// The list stacked on a new leading axis (sema has checked that the shapes agree).
Array stack(const std::vector<Array>& xs) {
  Array out;
  out.shape = {static_cast<int64_t>(xs.size())};
  out.shape.insert(out.shape.end(), xs[0].shape.begin(), xs[0].shape.end());
  out.data.clear();
  for (const Array& x : xs)
    out.data.insert(out.data.end(), x.data.begin(), x.data.end());
  return out;
}

Array one_input_op(PatternOp op, const std::vector<Array>& xs, bool list_input,
                   std::string_view pattern, Reduction reduction,
                   const std::vector<AxisSize>& sizes, std::optional<int64_t> ddof) {
  ResolveRequest request = make_request(op, shapes_of(xs), sizes);
  request.list_input = list_input;
  request.reduction = reduction;
  request.ddof = ddof;
  const auto recipe = resolve_cached(pattern, request);
  return apply_one_input(*recipe, list_input ? stack(xs) : xs[0], ddof);
}

// Position of the `*` term in a pack/unpack pattern that sema has accepted.
size_t star_position(std::string_view pattern) {
  const Pattern p = parse_pattern(pattern);
  const auto& terms = p.inputs[0].terms;
  for (size_t t = 0; t < terms.size(); ++t)
    if (terms[t].tokens[0].kind == AxisToken::Kind::star) return t;
  throw RuntimeError("reference: pack pattern without '*'");
}

// Where element `index` of a packed part (`star` dims before, `after` after the part's own
// packed dims) lands in the joined array, whose `*` axis starts this part at `start`.
std::vector<int64_t> joined_index(const std::vector<int64_t>& index, size_t star, size_t after,
                                  const Shape& part_shape, int64_t start) {
  std::vector<int64_t> out(index.begin(), index.begin() + static_cast<int64_t>(star));
  int64_t flat = 0;  // row-major position within the packed dims
  for (size_t d = star; d < index.size() - after; ++d)
    flat = flat * part_shape[d] + index[d];
  out.push_back(start + flat);
  out.insert(out.end(), index.end() - static_cast<int64_t>(after), index.end());
  return out;
}

}  // namespace

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw RuntimeError("reference: negative size in a shape");
    n *= s;
  }
  return n;
}

bool next_index(std::vector<int64_t>& index, const Shape& shape) {
  for (size_t d = shape.size(); d-- > 0;) {
    if (++index[d] < shape[d]) return true;
    index[d] = 0;
  }
  return false;
}

Array::Array(Shape s, std::vector<double> d) : shape(std::move(s)), data(std::move(d)) {
  if (static_cast<int64_t>(data.size()) != reference::numel(shape))
    throw RuntimeError("reference::Array: " + std::to_string(data.size()) +
                       " values do not fill a shape of " + std::to_string(reference::numel(shape)) +
                       " elements");
}

Array Array::filled(Shape shape, double value) {
  const int64_t n = reference::numel(shape);
  return Array(std::move(shape), std::vector<double>(static_cast<size_t>(n), value));
}

int64_t Array::numel() const {
  return reference::numel(shape);
}

int64_t Array::offset(const std::vector<int64_t>& index) const {
  if (index.size() != shape.size())
    throw RuntimeError("reference::Array: an index of " + std::to_string(index.size()) +
                       " entries for an array of rank " + std::to_string(shape.size()));
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (index[d] < 0 || index[d] >= shape[d])
      throw RuntimeError("reference::Array: index " + std::to_string(index[d]) + " of dim " +
                         std::to_string(d) + " is out of range for size " +
                         std::to_string(shape[d]));
    off = off * shape[d] + index[d];
  }
  return off;
}

Array rearrange(const Array& x, std::string_view pattern, const std::vector<AxisSize>& sizes) {
  return one_input_op(PatternOp::rearrange, {x}, false, pattern, Reduction::none, sizes, {});
}

Array rearrange(const std::vector<Array>& xs, std::string_view pattern,
                const std::vector<AxisSize>& sizes) {
  return one_input_op(PatternOp::rearrange, xs, true, pattern, Reduction::none, sizes, {});
}

Array reduce(const Array& x, std::string_view pattern, Reduction reduction,
             const std::vector<AxisSize>& sizes, std::optional<int64_t> ddof) {
  return one_input_op(PatternOp::reduce, {x}, false, pattern, reduction, sizes, ddof);
}

Array reduce(const std::vector<Array>& xs, std::string_view pattern, Reduction reduction,
             const std::vector<AxisSize>& sizes, std::optional<int64_t> ddof) {
  return one_input_op(PatternOp::reduce, xs, true, pattern, reduction, sizes, ddof);
}

Array repeat(const Array& x, std::string_view pattern, const std::vector<AxisSize>& sizes) {
  return one_input_op(PatternOp::repeat, {x}, false, pattern, Reduction::none, sizes, {});
}

Array einsum(std::string_view pattern, const std::vector<Array>& operands) {
  const auto recipe =
      resolve_cached(pattern, make_request(PatternOp::einsum, shapes_of(operands), {}));
  // out[output axes] = sum over the contracted axes of the product of every operand's
  // element at those axis values (numpy.einsum's definition).
  Array out = Array::filled(recipe->output_shape(), 0.0);
  AxisValues values(recipe->axes.size(), 0);
  for_each_output(*recipe, values, [&](int64_t o, AxisValues& v) {
    double sum = 0;
    for_each_combination(recipe->reduced_axes, *recipe, v, [&](const AxisValues& w) {
      double product = 1;
      for (size_t i = 0; i < operands.size(); ++i)
        product *= operands[i].data[offset_of(operands[i], recipe->input_groups[i], *recipe, w)];
      sum += product;
    });
    out.data[o] = sum;
  });
  return out;
}

std::pair<Array, std::vector<Shape>> pack(const std::vector<Array>& xs, std::string_view pattern) {
  const auto recipe = resolve_cached(pattern, make_request(PatternOp::pack, shapes_of(xs), {}));
  const size_t star = star_position(pattern);
  const size_t after = recipe->input_groups[0].size() - star - 1;
  Array out = Array::filled(recipe->output_shape(), 0.0);
  int64_t start = 0;  // where the current input begins along the `*` axis
  for (size_t i = 0; i < xs.size(); ++i) {
    const Array& x = xs[i];
    if (x.numel() > 0) {
      std::vector<int64_t> index(x.shape.size(), 0);
      do {
        out.at(joined_index(index, star, after, x.shape, start)) = x.at(index);
      } while (next_index(index, x.shape));
    }
    start += numel(recipe->packed_shapes[i]);
  }
  return {std::move(out), recipe->packed_shapes};
}

std::vector<Array> unpack(const Array& x, const std::vector<Shape>& packed_shapes,
                          std::string_view pattern) {
  ResolveRequest request = make_request(PatternOp::unpack, {x.shape}, {});
  request.packed = packed_shapes;
  const auto recipe = resolve_cached(pattern, request);
  const size_t star = star_position(pattern);
  const size_t after = x.shape.size() - star - 1;
  std::vector<Array> outs;
  int64_t start = 0;
  for (size_t i = 0; i < recipe->output_shapes.size(); ++i) {
    Array part = Array::filled(recipe->output_shapes[i], 0.0);
    if (part.numel() > 0) {
      std::vector<int64_t> index(part.shape.size(), 0);
      do {
        part.at(index) = x.at(joined_index(index, star, after, part.shape, start));
      } while (next_index(index, part.shape));
    }
    start += numel(recipe->packed_shapes[i]);
    outs.push_back(std::move(part));
  }
  return outs;
}

}  // namespace ein::reference
