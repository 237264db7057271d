// Concats folded into the stores of the kernel that computes their pieces
// (compiler/fuse/fold_stores.cpp): RoPE's re-interleaved pairs and its backward, concats along
// any dim and of packed spans, the views after a concat, and the cases left as they were
// (a piece read elsewhere, pieces of two kernels, a split after the concat). Each fused graph
// is run against the unfused one on random inputs in several layouts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "api/ops/ops_test_support.h"
#include "fuse_test_support.h"
#include "compiler/autodiff/autodiff.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/graph_builder.h"
#include "exec/execute.h"

namespace ein {
namespace {

using testing::expect_fused_same;
using testing::Layout;

int count(const Graph& g, GraphOp op) {
  int n = 0;
  for (const GraphNode& node : g.nodes)
    n += node.op == op ? 1 : 0;
  return n;
}

/// Whether some node other than an input or a kernel's result is a copy or a view.
int layout_and_concat_nodes(const Graph& g) {
  return count(g, GraphOp::concat) + count(g, GraphOp::reshape) + count(g, GraphOp::view) +
         count(g, GraphOp::permute) + count(g, GraphOp::slice);
}

int binary(GraphBuilder& b, ScalarOp op, int x, int y, const Shape& shape,
           std::vector<int> y_axes) {
  std::vector<int> all(shape.size());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int>(i);
  return b.map({x, y}, {all, std::move(y_axes)}, shape, DType::f32, "map",
               [op](Kernel& k, const std::vector<int>& in) { return k.apply(op, in[0], in[1]); });
}

int unary(GraphBuilder& b, ScalarOp op, int x) {
  const Shape shape = b.node(x).shape;
  std::vector<int> all(shape.size());
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = static_cast<int>(i);
  return b.map({x}, {all}, shape, DType::f32, "map",
               [op](Kernel& k, const std::vector<int>& in) { return k.apply(op, in[0]); });
}

/// RoPE as stdlib/llama.ein writes it, on x (b t e) with tables c, s (t e/2):
/// pairs = x split into (e/2, 2); x0, x1 = the pair's halves; the result re-interleaves
/// x0 c - x1 s and x0 s + x1 c: a concat along a new leading dim, a permute moving it last, and
/// a reshape merging it into e.
Graph rope(int64_t b, int64_t t, int64_t e, bool read_after = false) {
  GraphBuilder g("rope");
  const int x = g.input({b, t, e}), c = g.input({t, e / 2}), s = g.input({t, e / 2});
  const Shape half{b, t, e / 2};
  const int pairs = g.reshape(x, {b, t, e / 2, 2});
  const int x0 = g.reshape(g.slice(pairs, 3, 0, 1), half);
  const int x1 = g.reshape(g.slice(pairs, 3, 1, 2), half);
  const std::vector<int> table{1, 2};
  const int r0 = binary(g, ScalarOp::sub, binary(g, ScalarOp::mul, x0, c, half, table),
                        binary(g, ScalarOp::mul, x1, s, half, table), half, {0, 1, 2});
  const int r1 = binary(g, ScalarOp::add, binary(g, ScalarOp::mul, x0, s, half, table),
                        binary(g, ScalarOp::mul, x1, c, half, table), half, {0, 1, 2});
  const int cat = g.concat({g.reshape(r0, {1, b, t, e / 2}), g.reshape(r1, {1, b, t, e / 2})}, 0);
  const int y = g.reshape(g.permute(cat, {1, 2, 3, 0}), {b, t, e});
  return g.finish({read_after ? unary(g, ScalarOp::exp, y) : y});
}

TEST(FoldStores, RopeReinterleavesInItsStores) {
  const Graph g = rope(3, 5, 8);
  const Graph fused = fuse(g);
  const std::string report = fusion_report(g, fused);
  // One kernel, two strided stores into one (b t e) tensor: no concat, no copy after it.
  EXPECT_EQ(count_kernels(fused), 1) << report;
  EXPECT_EQ(layout_and_concat_nodes(fused), 0) << report;
  EXPECT_NE(report.find("(into output 0's tensor)"), std::string::npos) << report;
  EXPECT_NE(report.find("(folded into the stores)"), std::string::npos) << report;
  EXPECT_EQ(fused.nodes[fused.outputs[0]].shape, (Shape{3, 5, 8}));
  for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major})
    expect_fused_same(g, layout, 1);
  // A kernel reading the result reads the placed tensor.
  const Graph read = rope(2, 7, 6, true);
  EXPECT_EQ(count(fuse(read), GraphOp::concat), 0) << fusion_report(read, fuse(read));
  expect_fused_same(read, Layout::strided, 2);
}

TEST(FoldStores, RopeBackwardReinterleavesItsGradientInItsStores) {
  const Graph g = rope(2, 6, 10);
  const Backward bw = differentiate(g, {true, false, false});
  const Graph fused = fuse(bw.graph);
  // The gradient of x: the pair halves' gradients, concatenated along the pair dim.
  EXPECT_EQ(count(bw.graph, GraphOp::concat), 1);
  EXPECT_EQ(count(fused, GraphOp::concat), 0) << fusion_report(bw.graph, fused);
  EXPECT_EQ(count_kernels(fused), 1) << fusion_report(bw.graph, fused);
  for (Layout layout : {Layout::contiguous, Layout::column_major})
    expect_fused_same(bw.graph, layout, 3);
}

TEST(FoldStores, ConcatsAlongAnyDimAndOfPackedSpans) {
  for (int64_t dim : {0, 1, 2}) {
    GraphBuilder b(fmt::format("concat dim {}", dim));
    const int x = b.input({4, 3, 5});
    const int cat = b.concat(
        {unary(b, ScalarOp::exp, x), unary(b, ScalarOp::sin, x), unary(b, ScalarOp::tanh, x)}, dim);
    const Graph g = b.finish({cat});
    const Graph fused = fuse(g);
    EXPECT_EQ(count_kernels(fused), 1) << fusion_report(g, fused);
    EXPECT_EQ(count(fused, GraphOp::concat), 0) << fusion_report(g, fused);
    expect_fused_same(g, Layout::strided, 10 + static_cast<uint64_t>(dim));
  }
  // pack's `*`: each piece's dims [1, 3) flatten into the one concat dim.
  GraphBuilder b("pack");
  const int x = b.input({4, 3, 2});
  const int cat = b.add(GraphOp::concat, {unary(b, ScalarOp::exp, x), unary(b, ScalarOp::neg, x)},
                        {4, 12}, DType::f32, ConcatAttr{1, {2, 2}});
  const Graph g = b.finish({cat});
  const Graph fused = fuse(g);
  EXPECT_EQ(count(fused, GraphOp::concat), 0) << fusion_report(g, fused);
  expect_fused_same(g, Layout::column_major, 20);
}

TEST(FoldStores, ASplitAfterTheConcatEndsTheChain) {
  // The reshape (4, 12) -> (4, 3, 4) splits a dim: it stays a view of the placed tensor.
  GraphBuilder b("split after");
  const int x = b.input({4, 6});
  const int cat = b.concat({unary(b, ScalarOp::exp, x), unary(b, ScalarOp::sin, x)}, 1);
  const Graph g = b.finish({b.reshape(cat, {4, 3, 4})});
  const Graph fused = fuse(g);
  EXPECT_EQ(count(fused, GraphOp::concat), 0) << fusion_report(g, fused);
  EXPECT_EQ(count(fused, GraphOp::reshape), 1) << fusion_report(g, fused);
  expect_fused_same(g, Layout::contiguous, 30);
}

TEST(FoldStores, LeftAsIsWhenAPieceIsReadElsewhereOrComesFromAnotherKernel) {
  {  // a piece is also an output
    GraphBuilder b("piece read elsewhere");
    const int x = b.input({4, 6});
    const int e = unary(b, ScalarOp::exp, x);
    const Graph g = b.finish({b.concat({e, unary(b, ScalarOp::sin, x)}, 0), e});
    const Graph fused = fuse(g);
    EXPECT_EQ(count(fused, GraphOp::concat), 1) << fusion_report(g, fused);
    expect_fused_same(g, Layout::strided, 40);
  }
  {  // the pieces come from two kernels (different domains), or one is an input
    GraphBuilder b("two kernels");
    const int x = b.input({4, 6}), y = b.input({4, 2});
    const int cat = b.concat({unary(b, ScalarOp::exp, x), unary(b, ScalarOp::sin, y)}, 1);
    const int with_input = b.concat({unary(b, ScalarOp::tanh, x), x}, 0);
    const Graph g = b.finish({cat, with_input});
    const Graph fused = fuse(g);
    EXPECT_EQ(count(fused, GraphOp::concat), 2) << fusion_report(g, fused);
    expect_fused_same(g, Layout::column_major, 50);
  }
}

TEST(FoldStores, VerifyRejectsAPlacedStoreOutsideItsTensor) {
  const Graph g = rope(2, 3, 4);
  Graph fused = fuse(g);
  for (GraphNode& n : fused.nodes)
    if (n.op == GraphOp::fused) {
      auto& attr = std::get<FusedAttr>(n.attr);
      ASSERT_TRUE(attr.outputs[1].placed());
      attr.outputs[1].offset += 1;  // the last element would land one past the end
    }
  EXPECT_THROW(verify(fused), std::logic_error);
}

}  // namespace
}  // namespace ein
