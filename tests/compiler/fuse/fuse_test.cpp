// The fusion pass on the standard functions and on small pattern graphs: how many kernels each
// becomes, and that the fused graph computes what the unfused one does on fresh random inputs
// (contiguous, strided, column-major, broadcast and zero-size), against the unfused graph run
// in float64 as the oracle.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/graph_builder.h"
#include "compiler/graph/stdlib_graphs.h"
#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

using testing::Layout;

/// Builds a standard function's graph for a shape and dtype.
using BuildFn = std::function<Graph(const Shape&, DType)>;

/// Inputs for `g` (shapes from its input nodes): normal values, except i64 targets in
/// [0, classes) and the AdamW scalars and second moments, which need their own ranges.
std::vector<Tensor> inputs_for(const Graph& g, uint64_t seed, Layout layout, bool broadcast) {
  std::vector<Tensor> xs;
  const bool adamw = g.origin.rfind("adamw", 0) == 0;
  for (const GraphNode& n : g.nodes) {
    if (n.op != GraphOp::input) continue;
    const int index = std::get<InputAttr>(n.attr).index;
    Tensor x;
    if (n.dtype == DType::i64) {
      int64_t classes = 0;  // the logits' last dim
      for (const GraphNode& other : g.nodes)
        if (other.op == GraphOp::input && std::get<InputAttr>(other.attr).index == 0)
          classes = other.shape.back();
      std::vector<int64_t> t;
      for (int64_t i = 0; i < n.shape[0]; ++i)
        t.push_back(classes == 0 ? 0 : static_cast<int64_t>((i * 7 + seed) % classes));
      x = from_data<int64_t>(t, n.shape);
    } else if (adamw && n.shape.empty()) {
      const double scalars[] = {1e-2, 0.9, 0.999, 1e-8, 0.01, 3};
      x = from_data<double>({scalars[index - 4]}, {}).to(n.dtype);
    } else if (adamw && index == 3) {
      x = rand(n.shape, DType::f64, cpu(), seed + index).to(n.dtype);  // exp_avg_sq >= 0
    } else if (broadcast && n.shape.size() >= 2 && index == 0) {
      // One row repeated: stride 0 along the first dim.
      Shape one = n.shape;
      one[0] = 1;
      x = testing::random_tensor(one, n.dtype, seed + index, layout).expand(n.shape);
    } else {
      x = testing::random_tensor(n.shape, n.dtype, seed + index, layout);
    }
    xs.push_back(x);
  }
  return xs;
}

/// Runs `g64` unfused in float64 and `fuse(g32)` in f32 (the same graph in two dtypes);
/// expects the same outputs. `terms`: the most values one output sums.
void expect_graphs_match(const Graph& g32, const Graph& g64, Layout layout, bool broadcast,
                         uint64_t seed, int64_t terms, DType dtype = DType::f32) {
  const Graph fused = fuse(g32);
  const std::vector<Tensor> xs = inputs_for(g32, seed, layout, broadcast);
  std::vector<Tensor> xs64;
  for (const Tensor& x : xs)
    xs64.push_back(x.dtype() == DType::i64 ? x : x.to(DType::f64));
  const std::vector<Tensor> want = execute(g64, xs64), got = execute(fused, xs);
  ASSERT_EQ(got.size(), want.size());
  // f32 inputs and f32 arithmetic against float64, over `terms` terms per output.
  const testing::Tolerance tol = testing::tolerance_for(dtype, terms);
  for (size_t i = 0; i < got.size(); ++i)
    testing::expect_close(
        got[i], testing::to_array(want[i]), tol,
        fmt::format("{} output {} ({}{})\n{}", g32.origin, i, testing::layout_name(layout),
                    broadcast ? ", broadcast" : "", dump(fused)));
}

/// The most values one output of a function over `shape` sums: a row, or every element for
/// the losses' means (and their backward, which sums over rows).
int64_t terms_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return std::max<int64_t>(n, 1);
}

void expect_fused_matches(const BuildFn& build, const Shape& shape, Layout layout, bool broadcast,
                          uint64_t seed) {
  expect_graphs_match(build(shape, DType::f32), build(shape, DType::f64), layout, broadcast, seed,
                      terms_of(shape));
}

/// The backward graph of `g` for every float input.
Graph backward_of(const Graph& g) {
  std::vector<bool> needs;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) needs.push_back(n.dtype != DType::i64);
  return differentiate(g, needs).graph;
}

struct Case {
  const char* name;
  BuildFn build;
  int forward_kernels;
  bool differentiable = true;  ///< AdamW's update is not differentiated
};

std::vector<Case> cases() {
  return {
      {"softmax", [](const Shape& s, DType t) { return softmax_graph(s, t); }, 1},
      {"log_softmax", [](const Shape& s, DType t) { return log_softmax_graph(s, t); }, 1},
      {"layer_norm", [](const Shape& s, DType t) { return layer_norm_graph(s, t); }, 1},
      {"rms_norm", [](const Shape& s, DType t) { return rms_norm_graph(s, t); }, 1},
      // The per-row losses are a row kernel; their mean over the rows is its total store.
      {"cross_entropy", [](const Shape& s, DType t) { return cross_entropy_graph(s, t); }, 1},
      {"mse_loss", [](const Shape& s, DType t) { return mse_loss_graph(s, t); }, 1},
      {"adamw", [](const Shape& s, DType t) { return adamw_graph(s, t); }, 1, false},
  };
}

TEST(Fuse, StandardFunctionsForwardKernels) {
  for (const Case& c : cases()) {
    const Graph g = c.build({6, 10}, DType::f32);
    const Graph fused = fuse(g);
    EXPECT_EQ(count_kernels(fused), c.forward_kernels) << c.name << "\n" << fusion_report(g, fused);
  }
}

TEST(Fuse, StandardFunctionsMatchUnfused) {
  const std::vector<Shape> shapes = {{7, 33}, {3, 5, 17}, {1, 64}};
  uint64_t seed = 11;
  for (const Case& c : cases())
    for (const Shape& s : shapes) {
      if (c.name == std::string("cross_entropy") && s.size() != 2) continue;
      for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
        expect_fused_matches(c.build, s, layout, false, ++seed);
      expect_fused_matches(c.build, s, Layout::contiguous, true, ++seed);
    }
}

TEST(Fuse, StandardFunctionsZeroSize) {
  for (const Case& c : cases()) {
    expect_fused_matches(c.build, {0, 9}, Layout::contiguous, false, 3);
    // Rows of zero length: the max of nothing is an error unfused (as torch), so only the
    // functions without a max run; mean over nothing is NaN on both sides.
    const std::string name = c.name;
    if (name != "softmax" && name != "log_softmax" && name != "cross_entropy")
      expect_fused_matches(c.build, {4, 0}, Layout::contiguous, false, 4);
  }
}

TEST(Fuse, StandardFunctionsBackwardKernels) {
  for (const Case& c : cases()) {
    if (!c.differentiable) continue;
    const Graph g = backward_of(c.build({6, 10}, DType::f32));
    const Graph fused = fuse(g);
    EXPECT_LE(count_kernels(fused), 2) << c.name << "\n" << fusion_report(g, fused);
  }
}

TEST(Fuse, StandardFunctionsBackwardMatchUnfused) {
  uint64_t seed = 101;
  for (const Case& c : cases()) {
    if (!c.differentiable) continue;
    for (const Shape& s : {Shape{7, 33}, Shape{0, 5}})
      for (Layout layout : {Layout::contiguous, Layout::column_major}) {
        if (s[0] == 0 && c.name == std::string("cross_entropy")) continue;  // mean of nothing
        expect_graphs_match(backward_of(c.build(s, DType::f32)),
                            backward_of(c.build(s, DType::f64)), layout, false, ++seed,
                            terms_of(s));
      }
  }
}

// execute_into(): AdamW's fused update writes the parameter and both moments into the
// tensors it reads (one kernel, each point loaded before it is stored), with the values of a
// run into fresh outputs; where writing in place would be unsafe or impossible it falls back
// to a fresh tensor, and the values stay right.
TEST(Fuse, ExecuteIntoWritesAnUpdateInPlaceOnlyWhereThatIsSafe) {
  const Graph fused = fuse(adamw_graph({6, 10}, DType::f32));
  const auto fresh_inputs = [&] {
    return inputs_for(fused, 7, Layout::contiguous, false);
  };
  const std::vector<Tensor> want = execute(fused, fresh_inputs());
  ASSERT_EQ(want.size(), 3u);
  const auto expect_values = [&](const std::vector<Tensor>& got, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].to_vector<double>(), want[i].to_vector<double>()) << what << " output " << i;
  };
  {  // param, exp_avg, exp_avg_sq updated in place
    const std::vector<Tensor> xs = fresh_inputs();
    const std::vector<Tensor> into{xs[0], xs[2], xs[3]};
    const std::vector<Tensor> got = execute_into(fused, xs, into);
    for (size_t i = 0; i < into.size(); ++i)
      EXPECT_TRUE(got[i].same_storage(into[i])) << "output " << i << " not in place";
    expect_values(got, "in place");
  }
  {  // a non-contiguous destination, and two outputs asked into one tensor: fresh tensors
    const std::vector<Tensor> xs = fresh_inputs();
    const Tensor wide = zeros({6, 20});
    const Tensor shared = zeros({6, 10});
    const std::vector<Tensor> into{wide.slice(1, 0, 10), shared, shared};
    const std::vector<Tensor> got = execute_into(fused, xs, into);
    EXPECT_FALSE(got[0].same_storage(wide));
    EXPECT_TRUE(got[1].same_storage(shared));
    EXPECT_FALSE(got[2].same_storage(shared));
    expect_values(got, "fallbacks");
  }
  {  // the parameter read transposed from the memory asked to receive it row-major: the
     // elements differ point by point, so the update must not write there
    std::vector<Tensor> xs = fresh_inputs();
    const Tensor base = xs[0].transpose(0, 1).contiguous();  // [10, 6], the same values
    xs[0] = base.transpose(0, 1);                              // [6, 10] with strides (1, 6)
    const std::vector<Tensor> into{base.view({6, 10}), Tensor(), Tensor()};
    const std::vector<Tensor> got = execute_into(fused, xs, into);
    EXPECT_FALSE(got[0].same_storage(base));
    expect_values(got, "transposed read");
  }
}

TEST(Fuse, OtherDtypes) {
  // f16 and bf16 kernels compute in f32 and round once when storing, so the fused results are
  // within the dtype's output rounding of float64; f64 kernels compute in f64.
  uint64_t seed = 300;
  for (const Case& c : cases())
    for (DType t : {DType::f64, DType::f16, DType::bf16}) {
      const Shape s{4, 40};
      expect_graphs_match(c.build(s, t), c.build(s, DType::f64), Layout::strided, false, ++seed,
                          terms_of(s), t);
    }
}

/// `layers` row functions in a chain, alternating LayerNorm and softmax over (rows, n).
Graph chain(int layers, const Shape& shape, DType dtype) {
  GraphBuilder b(fmt::format("chain of {}", layers));
  int x = b.input(shape, dtype);
  const Graph ln = layer_norm_graph(shape, dtype), sm = softmax_graph(shape, dtype);
  for (int l = 0; l < layers; ++l)  // input 0 is x; the weights and biases are new inputs
    x = b.inline_graph(l % 2 ? sm : ln, {x}).front();
  b.output(x);
  return b.take();
}

TEST(Fuse, ChainsOfRowFunctionsSplitIntoKernelsOfAtMostEightStages) {
  // Six row functions, two stages each: 12 stages, so two kernels; the backward also splits.
  const Graph g = chain(6, {5, 24}, DType::f32);
  const Graph fused = fuse(g);
  EXPECT_EQ(count_kernels(fused), 2) << fusion_report(g, fused);
  for (const GraphNode& n : fused.nodes) {
    if (n.op != GraphOp::fused) continue;
    EXPECT_LE(to_general_form(*std::get<FusedAttr>(n.attr).kernel).stages.size(), 8u);
  }
  expect_graphs_match(g, chain(6, {5, 24}, DType::f64), Layout::contiguous, false, 77, 24 * 6);
  expect_graphs_match(backward_of(g), backward_of(chain(6, {5, 24}, DType::f64)),
                      Layout::column_major, false, 78, 5 * 24 * 6);
}

}  // namespace
}  // namespace ein
