// The fusion rules on small hand-built and pattern-lowered graphs: a permute before a map is
// one kernel reading permuted strides, elementwise chains with broadcasts inline, a reduce over
// non-trailing dims is one kernel, and a contraction stays a BLAS call with its reason while
// its bias + GELU tail becomes one kernel. Values are checked against the unfused graph.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/execute.h"
#include "compiler/graph/expression_graphs.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/graph_builder.h"
#include "compiler/graph/lower_patterns.h"
#include <ein/pattern_parser.h>
#include "api/ops/ops_test_support.h"
#include "fuse_test_support.h"
#include "runtime/blas/contract.h"

namespace ein {
namespace {

using testing::expect_fused_same;
using testing::Layout;

std::vector<int> members(const Graph& fused) {
  for (const GraphNode& n : fused.nodes)
    if (n.op == GraphOp::fused) return std::get<FusedAttr>(n.attr).members;
  return {};
}

TEST(FuseRules, PermuteThenMapIsOneKernelReadingPermutedStrides) {
  GraphBuilder b("permute then exp");
  const int x = b.input({4, 6, 8});
  const int p = b.permute(x, {2, 0, 1});
  const int e =
      b.map({p}, {{0, 1, 2}}, {8, 4, 6}, DType::f32, "map",
            [](Kernel& k, const std::vector<int>& in) { return k.apply(ScalarOp::exp, in[0]); });
  const Graph g = b.finish({e});
  const Graph fused = fuse(g);
  EXPECT_EQ(count_kernels(fused), 1);
  EXPECT_EQ(members(fused), (std::vector<int>{p, e})) << fusion_report(g, fused);
  for (const GraphNode& n : fused.nodes)
    EXPECT_NE(n.op, GraphOp::permute);
  for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
    expect_fused_same(g, layout, 1);
}

TEST(FuseRules, ElementwiseChainWithBroadcastsInlines) {
  // y = tanh(x · w) + z, with w (b) broadcast over a, then a slice of y's first half.
  GraphBuilder b("chain");
  const int x = b.input({5, 12}), w = b.input({12}), z = b.input({1, 12});
  const int m = b.map(
      {x, w}, {{0, 1}, {1}}, {5, 12}, DType::f32, "map",
      [](Kernel& k, const std::vector<int>& in) { return k.apply(ScalarOp::mul, in[0], in[1]); });
  const int t = b.map({m, z}, {{0, 1}, {0, 1}}, {5, 12}, DType::f32, "map",
                      [](Kernel& k, const std::vector<int>& in) {
                        return k.apply(ScalarOp::add, k.apply(ScalarOp::tanh, in[0]), in[1]);
                      });
  const int s = b.slice(x, 1, 3, 9);
  const int u =
      b.map({s}, {{0, 1}}, {5, 6}, DType::f32, "map",
            [](Kernel& k, const std::vector<int>& in) { return k.apply(ScalarOp::square, in[0]); });
  const Graph g = b.finish({t, u});
  const Graph fused = fuse(g);
  EXPECT_EQ(count_kernels(fused), 2) << fusion_report(g, fused);  // two domains: (5 12), (5 6)
  for (Layout layout : {Layout::contiguous, Layout::strided})
    expect_fused_same(g, layout, 7);
}

TEST(FuseRules, ReduceOverNonTrailingDimsIsOneKernel) {
  const Graph g = reduce_pattern_graph("a b c -> a c", Reduction::mean, {}, {3, 40, 5}, DType::f32);
  const Graph fused = fuse(g);
  EXPECT_EQ(count_kernels(fused), 1) << fusion_report(g, fused);
  for (Layout layout : {Layout::contiguous, Layout::column_major})
    expect_fused_same(g, layout, 3);
  const Graph v =
      reduce_pattern_graph("a (b c) -> c a", Reduction::var, 1, {4, 30}, DType::f32, {{"b", 6}});
  EXPECT_EQ(count_kernels(fuse(v)), 1) << fusion_report(v, fuse(v));
  expect_fused_same(v, Layout::strided, 5);
}

TEST(FuseRules, ContractionStaysBlasAndItsTailFuses) {
  // h = gelu(x @ w + bias): the product is a BLAS call, the bias and GELU one kernel.
  ResolveRequest req;
  req.op = PatternOp::einsum;
  req.shapes = {{8, 16}, {16, 32}};
  const Recipe r = resolve_pattern(parse_pattern("b d, d f -> b f"), req);
  GraphBuilder b(lower_pattern(r, {{{8, 16}, DType::f32}, {{16, 32}, DType::f32}}, {}, 0, "mlp"));
  const int y = b.graph().outputs.front();
  const int bias = b.input({32});
  const int h = b.map({y, bias}, {{0, 1}, {1}}, {8, 32}, DType::f32, "map",
                      [](Kernel& k, const std::vector<int>& in) {
                        return k.apply(ScalarOp::gelu, k.apply(ScalarOp::add, in[0], in[1]));
                      });
  const Graph g = b.finish({h});
  const Graph fused = fuse(g);
  EXPECT_EQ(count_kernels(fused), 1);
  bool contract_noted = false;
  for (const GraphNode& n : fused.nodes)
    if (n.op == GraphOp::contract) contract_noted = n.note.find("BLAS") != std::string::npos;
  EXPECT_TRUE(contract_noted) << fusion_report(g, fused);
  expect_fused_same(g, Layout::contiguous, 9);
}

TEST(FuseRules, WideningCastsInlineNarrowingOnesStay) {
  GraphBuilder b("casts");
  const int x = b.input({6, 10}, DType::bf16);
  const int up = b.cast(x, DType::f32);
  const int e =
      b.map({up}, {{0, 1}}, {6, 10}, DType::f32, "map",
            [](Kernel& k, const std::vector<int>& in) { return k.apply(ScalarOp::exp, in[0]); });
  const int down = b.cast(e, DType::bf16);
  const Graph g = b.finish({down});
  const Graph fused = fuse(g);
  EXPECT_EQ(count_kernels(fused), 1);
  EXPECT_EQ(members(fused), (std::vector<int>{up, e})) << fusion_report(g, fused);
  EXPECT_EQ(fused.nodes.back().op, GraphOp::cast);
  EXPECT_NE(fused.nodes.back().note.find("cast f32 -> bf16"), std::string::npos);
  const Tensor in = testing::random_tensor({6, 10}, DType::bf16, 3, Layout::strided);
  testing::expect_close(execute(fused, {in})[0], testing::to_array(execute(g, {in})[0]), {0, 0},
                        "casts");
}

TEST(FuseRules, AContractionReadOnlyAsF32ReturnsF32) {
  // dW = xᵀ·dY in bf16, read by nothing but its cast to f32 (a bf16 step's weight gradient):
  // the GEMM returns the f32 sums, not rounded to bf16 first; through a view and a concat too.
  GraphBuilder b("widened");
  const int x = b.input({8, 24}, DType::bf16), dy = b.input({8, 16}, DType::bf16);
  const int dw = b.add(GraphOp::contract, {x, dy}, {24, 16}, DType::bf16, ContractAttr{{0, 1}, {0, 2}, {1, 2}});
  const int dw2 = b.add(GraphOp::contract, {x, dy}, {24, 16}, DType::bf16, ContractAttr{{0, 1}, {0, 2}, {1, 2}});
  const int both = b.concat({dw, dw2}, 1);
  const int up = b.cast(both, DType::f32);
  // A contraction with another reader keeps its dtype: its bf16 value is read as such.
  const int shared = b.add(GraphOp::contract, {x, dy}, {24, 16}, DType::bf16, ContractAttr{{0, 1}, {0, 2}, {1, 2}});
  const int shared_up = b.cast(shared, DType::f32);
  const Graph g = b.finish({up, shared_up, shared});
  const Graph fused = fuse(g);
  int f32_contracts = 0, bf16_contracts = 0;
  for (const GraphNode& n : fused.nodes)
    if (n.op == GraphOp::contract) ++(n.dtype == DType::f32 ? f32_contracts : bf16_contracts);
  EXPECT_EQ(f32_contracts, 2) << fusion_report(g, fused);
  EXPECT_EQ(bf16_contracts, 1) << fusion_report(g, fused);
  const Tensor xs = testing::random_tensor({8, 24}, DType::bf16, 5, Layout::strided);
  const Tensor dys = testing::random_tensor({8, 16}, DType::bf16, 6, Layout::contiguous);
  const std::vector<Tensor> got = execute(fused, {xs, dys});
  ASSERT_EQ(got[0].dtype(), DType::f32);
  // The f32 sums of bf16 products (exact in f32), against float64: no bf16 rounding on the way.
  const Tensor want = contract(xs.to(DType::f64), {0, 1}, dys.to(DType::f64), {0, 2}, {1, 2});
  for (int64_t half : {0, 1})
    testing::expect_close(got[0].slice(1, 16 * half, 16 * (half + 1)), testing::to_array(want),
                          testing::tolerance_for(DType::f32, 8), "widened");
  const std::vector<double> rounded =
      execute(g, {xs, dys})[0].slice(1, 0, 16).to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> exact = want.to_vector<double>();
  size_t differs = 0;  // the unfused graph rounds to bf16 in between: visibly different
  for (size_t i = 0; i < exact.size(); ++i) differs += rounded[i] != exact[i];
  EXPECT_GT(differs, exact.size() / 2);
}

/// rearrange(x, pattern) then exp, as one graph.
Graph rearrange_then_exp(const std::string& pattern, const Shape& shape,
                         const std::vector<AxisSize>& sizes) {
  ResolveRequest req;
  req.op = PatternOp::rearrange;
  req.shapes = {shape};
  req.sizes = sizes;
  const Recipe r = resolve_pattern(parse_pattern(pattern), req);
  GraphBuilder b(lower_pattern(r, {{shape, DType::f32}}, {}, 0, pattern));
  const int y = b.graph().outputs.front();
  std::vector<int> all(b.node(y).shape.size());
  std::iota(all.begin(), all.end(), 0);
  const int e =
      b.map({y}, {all}, b.node(y).shape, DType::f32, "map",
            [](Kernel& k, const std::vector<int>& in) { return k.apply(ScalarOp::exp, in[0]); });
  return b.finish({e});
}

TEST(FuseRules, SplittingReshapesFoldMergingOnesStay) {
  // A split is affine: folded into the kernel's read. A merge depends on the run-time strides
  // (a view or a copy): the reshape stays a node and the kernel reads its result.
  const Graph split = rearrange_then_exp("b (h w) c -> b h w c", {2, 12, 3}, {{"h", 3}});
  const Graph fs = fuse(split);
  EXPECT_EQ(count_kernels(fs), 1);
  for (const GraphNode& n : fs.nodes)
    EXPECT_NE(n.op, GraphOp::reshape) << fusion_report(split, fs);
  const Graph merge = rearrange_then_exp("b h w c -> b (h w) c", {2, 3, 4, 5}, {});
  const Graph fm = fuse(merge);
  EXPECT_EQ(count_kernels(fm), 1);
  bool kept = false;
  for (const GraphNode& n : fm.nodes)
    kept = kept || n.op == GraphOp::reshape;
  EXPECT_TRUE(kept) << fusion_report(merge, fm);
  for (Layout layout : {Layout::contiguous, Layout::column_major}) {
    expect_fused_same(split, layout, 21);
    expect_fused_same(merge, layout, 22);
  }
}

TEST(FuseRules, MapExpressionGraph) {
  const Graph g =
      map_expression_graph("x[b s d], m[b s] -> (x - m)**2", {{2, 3, 4}, {2, 3}}, DType::f32);
  EXPECT_EQ(count_kernels(fuse(g)), 1);
  expect_fused_same(g, Layout::column_major, 11);
}

}  // namespace
}  // namespace ein
