// Recipe → Graph IR. The shapes of the graphs:
//   rearrange, repeat   input → view (split, permute, new axes at stride 0) → reshape
//   list input          inputs → view (a new unit dim) → concat → ... as above
//   reduce              input → view (split) → reduce (kept dims in output order) → permute
//                       → reshape
//   einsum              inputs → view (split, diagonals, broadcast size-1 axes dropped) →
//                       contract … (pairwise order from plan_contraction) → reduce/permute →
//                       reshape
//   pack                inputs → concat (each input's `*` dims flattened into its slot)
//   unpack              input → slice → reshape, one pair per output
#include "compiler/graph/lower_patterns.h"

#include <algorithm>
#include <numeric>

#include "compiler/graph/contraction_plan.h"
#include "compiler/graph/graph_builder.h"

namespace ein {
namespace {

/// Elementary axes of input `i`: the split per dim, and the axis id of each elementary axis.
/// A dim of size 1 where its axes are longer (einsum broadcasting) splits into size-1 axes.
struct Elementary {
  std::vector<Shape> split;
  std::vector<int> ids;
  Shape sizes;
};

Elementary elementary(const Recipe& r, size_t input, const Shape& shape) {
  Elementary e;
  const auto& groups = r.input_groups[input];
  for (size_t d = 0; d < groups.size(); ++d) {
    Shape s;
    for (int id : groups[d]) {
      const int64_t size = shape[d] == 1 ? 1 : r.axes[id].size;
      s.push_back(size);
      e.ids.push_back(id);
      e.sizes.push_back(size);
    }
    e.split.push_back(std::move(s));
  }
  return e;
}

/// Output axis ids in output order, without size-1 axes (the final reshape restores them).
std::vector<int> output_ids(const Recipe& r) {
  std::vector<int> out;
  for (const auto& group : r.output_groups)
    for (int id : group)
      if (r.axes[id].size != 1) out.push_back(id);
  return out;
}

int lower_layout(GraphBuilder& b, const Recipe& r, int x, const Elementary& e, DType dtype) {
  ViewAttr view{e.split, {}};
  Shape sizes;
  for (const auto& group : r.output_groups)
    for (int id : group) {
      auto it = std::find(e.ids.begin(), e.ids.end(), id);
      if (it != e.ids.end()) {
        view.dims.push_back({static_cast<int>(it - e.ids.begin())});
        sizes.push_back(e.sizes[it - e.ids.begin()]);
      } else if (r.axes[id].size != 1) {  // repeat: a new axis, stride 0
        view.dims.push_back({});
        sizes.push_back(r.axes[id].size);
      }
    }
  const int v = b.add(GraphOp::view, {x}, sizes, dtype, std::move(view));
  return b.add(GraphOp::reshape, {v}, r.output_shape(), dtype);
}

/// `t` (labelled `ids`) summed over the ids `keep` lacks, then ordered as `keep`.
int sum_to(GraphBuilder& b, int t, const std::vector<int>& ids, const std::vector<int>& keep,
           DType dtype, const Recipe& r) {
  std::vector<bool> reduced;
  std::vector<int> kept;
  for (int id : ids) {
    const bool gone = std::find(keep.begin(), keep.end(), id) == keep.end();
    reduced.push_back(gone);
    if (!gone) kept.push_back(id);
  }
  std::vector<int64_t> order;
  Shape kept_shape, out_shape;
  for (int id : kept)
    kept_shape.push_back(r.axes[id].size);
  for (int id : keep) {
    order.push_back(std::find(kept.begin(), kept.end(), id) - kept.begin());
    out_shape.push_back(r.axes[id].size);
  }
  if (std::find(reduced.begin(), reduced.end(), true) != reduced.end())
    t = b.add(
        GraphOp::reduce, {t}, kept_shape, dtype,
        ReduceAttr{Reduction::sum, {}, reduced, std::vector<int>(order.begin(), order.end())});
  return b.add(GraphOp::permute, {t}, out_shape, dtype, PermuteAttr{order});
}

void lower_einsum(GraphBuilder& b, const Recipe& r, const std::vector<TensorType>& inputs) {
  const DType dtype = inputs.front().dtype;
  std::vector<int> live;
  std::vector<std::vector<int>> labels;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int x = b.input(inputs[i].shape, inputs[i].dtype);
    const Elementary e = elementary(r, i, inputs[i].shape);
    ViewAttr view{e.split, {}};
    std::vector<int> ids;
    Shape sizes;
    for (size_t a = 0; a < e.ids.size(); ++a) {
      if (e.sizes[a] == 1 && r.axes[e.ids[a]].size != 1) continue;  // broadcast: absent here
      auto seen = std::find(ids.begin(), ids.end(), e.ids[a]);
      if (seen != ids.end()) {  // `i i`: the diagonal walks both axes at once
        view.dims[seen - ids.begin()].push_back(static_cast<int>(a));
        continue;
      }
      ids.push_back(e.ids[a]);
      view.dims.push_back({static_cast<int>(a)});
      sizes.push_back(e.sizes[a]);
    }
    live.push_back(b.add(GraphOp::view, {x}, sizes, dtype, std::move(view)));
    labels.push_back(std::move(ids));
  }
  std::vector<int> out = output_ids(r);
  if (live.size() > 1) {
    // A size-1 axis of the output that every input has (a batch of one, as when sampling) stays
    // an axis of the contractions, as a longer one would: the graph then has the shape it has
    // at any batch, which the attention recogniser (compiler/fuse/attention.h) relies on.
    out.clear();
    for (const auto& group : r.output_groups)
      for (int id : group) {
        bool everywhere = true;
        for (const auto& l : labels)
          everywhere = everywhere && std::find(l.begin(), l.end(), id) != l.end();
        if (r.axes[id].size != 1 || everywhere) out.push_back(id);
      }
    std::vector<int64_t> sizes;
    for (const ElementaryAxis& a : r.axes)
      sizes.push_back(a.size);
    for (const ContractionStep& step : plan_contraction(labels, out, sizes).steps) {
      Shape shape;
      for (int id : step.result_axes)
        shape.push_back(r.axes[id].size);
      const int c = b.add(GraphOp::contract, {live[step.lhs], live[step.rhs]}, shape, dtype,
                          ContractAttr{labels[step.lhs], labels[step.rhs], step.result_axes});
      for (int k : {std::max(step.lhs, step.rhs), std::min(step.lhs, step.rhs)}) {
        live.erase(live.begin() + k);
        labels.erase(labels.begin() + k);
      }
      live.push_back(c);
      labels.push_back(step.result_axes);
    }
  }
  const int t = sum_to(b, live.front(), labels.front(), out, dtype, r);
  b.output(b.add(GraphOp::reshape, {t}, r.output_shape(), dtype));
}

}  // namespace

Graph lower_pattern(const Recipe& r, const std::vector<TensorType>& inputs,
                    std::optional<int64_t> ddof, size_t star, const std::string& origin) {
  GraphBuilder b(origin);
  const DType dtype = inputs.front().dtype;
  switch (r.op) {
    case PatternOp::rearrange:
    case PatternOp::repeat:
    case PatternOp::reduce: {
      int x;
      Shape shape = inputs.front().shape;
      if (inputs.size() > 1 || r.input_groups[0].size() == shape.size() + 1) {  // a list: stack
        std::vector<int> parts;
        for (size_t i = 0; i < inputs.size(); ++i) {
          const int in = b.input(inputs[i].shape, inputs[i].dtype);
          ViewAttr unit{{}, {{}}};
          Shape stacked{1};
          for (size_t d = 0; d < shape.size(); ++d) {
            unit.split.push_back({shape[d]});
            unit.dims.push_back({static_cast<int>(d)});
            stacked.push_back(shape[d]);
          }
          parts.push_back(b.add(GraphOp::view, {in}, stacked, dtype, std::move(unit)));
        }
        shape.insert(shape.begin(), static_cast<int64_t>(inputs.size()));
        x = b.add(GraphOp::concat, parts, shape, dtype,
                  ConcatAttr{0, std::vector<int64_t>(inputs.size(), 1)});
      } else {
        x = b.input(inputs.front().shape, inputs.front().dtype);
      }
      const Elementary e = elementary(r, 0, shape);
      if (r.op != PatternOp::reduce) {
        b.output(lower_layout(b, r, x, e, dtype));
        break;
      }
      ViewAttr split{e.split, {}};
      for (size_t a = 0; a < e.ids.size(); ++a)
        split.dims.push_back({static_cast<int>(a)});
      const int v = b.add(GraphOp::view, {x}, e.sizes, dtype, std::move(split));
      std::vector<bool> reduced;
      std::vector<int> kept;
      for (int id : e.ids) {
        const bool gone =
            std::find(r.reduced_axes.begin(), r.reduced_axes.end(), id) != r.reduced_axes.end();
        reduced.push_back(gone);
        if (!gone) kept.push_back(id);
      }
      std::vector<int64_t> order;
      Shape kept_shape, out_shape;
      for (int id : kept)
        kept_shape.push_back(r.axes[id].size);
      for (const auto& group : r.output_groups)
        for (int id : group)
          if (auto it = std::find(kept.begin(), kept.end(), id); it != kept.end()) {
            order.push_back(it - kept.begin());
            out_shape.push_back(r.axes[id].size);
          }
      // The result dtype rule of reduce_dims (tensor_kernels.h).
      const bool boolean = r.reduction == Reduction::any || r.reduction == Reduction::all;
      const bool integral = dtype == DType::i64 || dtype == DType::i32 || dtype == DType::i8 ||
                            dtype == DType::u8 || dtype == DType::boolean;
      const DType out = boolean ? DType::boolean : integral ? DType::f32 : dtype;
      const int red = b.add(
          GraphOp::reduce, {v}, kept_shape, out,
          ReduceAttr{r.reduction, ddof, reduced, std::vector<int>(order.begin(), order.end())});
      const int p = b.add(GraphOp::permute, {red}, out_shape, out, PermuteAttr{order});
      b.output(b.add(GraphOp::reshape, {p}, r.output_shape(), out));
      break;
    }
    case PatternOp::einsum:
      lower_einsum(b, r, inputs);
      break;
    case PatternOp::pack: {
      std::vector<int> parts;
      std::vector<int64_t> spans;
      for (size_t i = 0; i < inputs.size(); ++i) {
        parts.push_back(b.input(inputs[i].shape, inputs[i].dtype));
        spans.push_back(static_cast<int64_t>(r.packed_shapes[i].size()));
      }
      b.output(b.add(GraphOp::concat, parts, r.output_shape(), dtype,
                     ConcatAttr{static_cast<int64_t>(star), spans}));
      break;
    }
    case PatternOp::unpack: {
      const int x = b.input(inputs.front().shape, inputs.front().dtype);
      const Shape& in = inputs.front().shape;
      const size_t after = in.size() - star - 1;
      int64_t at = 0;
      for (const Shape& shape : r.output_shapes) {
        const int64_t n = std::accumulate(shape.begin() + static_cast<int64_t>(star),
                                          shape.end() - static_cast<int64_t>(after), int64_t{1},
                                          std::multiplies<>());
        Shape sliced = in;
        sliced[star] = n;
        const int s = b.add(GraphOp::slice, {x}, sliced, dtype,
                            SliceAttr{static_cast<int64_t>(star), at, at + n});
        b.output(b.add(GraphOp::reshape, {s}, shape, dtype));
        at += n;
      }
      break;
    }
    case PatternOp::parse_shape:
      break;  // shapes only: nothing to compute
  }
  return b.finish();
}

Graph lower_map(std::shared_ptr<const Kernel> body, const std::vector<std::vector<int>>& axes,
                const std::vector<TensorType>& inputs, const Shape& shape, DType out_dtype,
                const std::string& origin) {
  GraphBuilder b(origin);
  std::vector<int> ins;
  for (const TensorType& t : inputs)
    ins.push_back(b.input(t.shape, t.dtype));
  return b.finish({b.map(std::move(ins), axes, shape, out_dtype, std::move(body))});
}

}  // namespace ein
