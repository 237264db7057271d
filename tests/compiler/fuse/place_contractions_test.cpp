// Contractions written straight into their slot of a concat (compiler/fuse/place_contractions.cpp,
// the executor's placed_destination): the weight gradient of a projection sliced from one
// weight (the q|k|v of stdlib/gpt.ein), pieces reached through a permute and a reshape, and
// the cases left to the concat's copy (a piece read elsewhere, listed twice, or one whose slot
// is no strided tensor of the contraction's shape). Each fused graph runs against the unfused
// one on random inputs in several layouts; the GEMMs' in-place writes are counted, and the
// memory the executor allocates is what fused_step_memory() predicts.
#include <gtest/gtest.h>

#include <vector>

#include <ein/storage.h>

#include "compiler/cost/step_memory.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/graph_builder.h"
#include "exec/execute.h"
#include "fuse_test_support.h"
#include "runtime/blas/contract.h"

namespace ein {
namespace {

using testing::expect_fused_same;
using testing::Layout;

/// xᵀ·dy: x (t d), dy (t f) -> (d f); or (f d) when `transposed`.
int weight_gradient(GraphBuilder& b, int x, int dy, bool transposed = false) {
  const Shape& xs = b.node(x).shape;
  const Shape& ys = b.node(dy).shape;
  const Shape shape = transposed ? Shape{ys[1], xs[1]} : Shape{xs[1], ys[1]};
  return b.add(GraphOp::contract, {x, dy}, shape, DType::f32,
               ContractAttr{{0, 1}, {0, 2}, transposed ? std::vector<int>{2, 1}
                                                       : std::vector<int>{1, 2}});
}

/// The three weight gradients of q, k and v sliced from one (d, 3f) weight, concatenated.
Graph qkv_weight_gradient(int64_t t, int64_t d, int64_t f) {
  GraphBuilder b("qkv weight gradient");
  const int x = b.input({t, d});
  std::vector<int> pieces;
  for (int i = 0; i < 3; ++i)
    pieces.push_back(weight_gradient(b, x, b.input({t, f})));
  return b.finish({b.concat(pieces, 1)});
}

const ConcatAttr& only_concat(const Graph& g) {
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::concat) return std::get<ConcatAttr>(n.attr);
  ADD_FAILURE() << "no concat\n" << dump(g);
  static const ConcatAttr none;
  return none;
}

/// The fused graph's activations' peak as the executor allocates it, above the inputs.
int64_t measured_peak(const Graph& fused, const std::vector<Tensor>& inputs) {
  const int64_t base = memory_allocated(cpu());
  reset_peak_memory_stats(cpu());
  const std::vector<Tensor> out = execute(fused, inputs);
  return max_memory_allocated(cpu()) - base;
}

std::vector<Tensor> random_inputs(const Graph& g, Layout layout, uint64_t seed) {
  std::vector<Tensor> xs;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) xs.push_back(testing::random_tensor(n.shape, n.dtype, ++seed, layout));
  return xs;
}

TEST(PlaceContractions, WeightGradientPiecesWriteTheirSlots) {
  const Graph g = qkv_weight_gradient(7, 5, 4);
  const Graph fused = fuse(g);
  const ConcatAttr& a = only_concat(fused);
  ASSERT_EQ(a.placed.size(), 3u) << dump(fused);
  for (int p : a.placed) {
    ASSERT_GE(p, 0) << dump(fused);
    EXPECT_EQ(fused.nodes[static_cast<size_t>(p)].op, GraphOp::contract);
  }
  EXPECT_NE(dump(fused).find("written in place by"), std::string::npos) << dump(fused);
  for (Layout layout : {Layout::contiguous, Layout::strided, Layout::column_major}) {
    const int64_t before = contract_stats().written_in_place;
    expect_fused_same(g, layout, 7, 8);
    EXPECT_EQ(contract_stats().written_in_place - before, 3) << testing::layout_name(layout);
  }
}

// A graph may run in another dtype than it was built in (the reference runs in float64): the
// concat's buffer has the node's dtype, so f64 pieces are computed and copied, as unplaced.
TEST(PlaceContractions, AGraphRunInAnotherDtypeCopiesItsPieces) {
  const Graph g = qkv_weight_gradient(7, 5, 4);
  const Graph fused = fuse(g);
  std::vector<Tensor> xs;
  uint64_t seed = 70;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) xs.push_back(randn(n.shape, DType::f64, cpu(), ++seed));
  const int64_t before = contract_stats().written_in_place;
  const std::vector<Tensor> got = execute(fused, xs), want = execute(g, xs);
  EXPECT_EQ(contract_stats().written_in_place, before);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dtype(), want[0].dtype());
  EXPECT_EQ(got[0].to_vector<double>(), want[0].to_vector<double>());
}

TEST(PlaceContractions, TheBufferIsAllTheMemoryAndThePlanSaysSo) {
  const Graph g = qkv_weight_gradient(9, 6, 5);
  const Graph fused = fuse(g);
  const std::vector<Tensor> xs = random_inputs(g, Layout::contiguous, 30);
  const int64_t concat_bytes = 6 * 15 * 4;
  // Placed: the concat's buffer, nothing else (no piece of its own).
  const Graph none;
  const StepMemory plan = fused_step_memory(fused, 1, none, 0);
  EXPECT_EQ(plan.peak, concat_bytes);
  EXPECT_EQ(measured_peak(fused, xs), concat_bytes);
  // The same graph with the pieces copied: three pieces and the buffer, measured and planned.
  Graph copied = fused;
  for (GraphNode& n : copied.nodes)
    if (auto* c = std::get_if<ConcatAttr>(&n.attr)) c->placed.clear();
  EXPECT_EQ(fused_step_memory(copied, 1, none, 0).peak, 2 * concat_bytes);
  EXPECT_EQ(measured_peak(copied, xs), 2 * concat_bytes);
  const std::vector<Tensor> want = execute(copied, xs), got = execute(fused, xs);
  EXPECT_EQ(got[0].to_vector<double>(), want[0].to_vector<double>());
}

TEST(PlaceContractions, PiecesThroughAPermuteAndAReshape) {
  // Piece 0 is computed (f d) and permuted to (d f); piece 1 is (d f) reshaped to (d, f/2, 2)
  // and back: both are placed, the slot taken back through the layout nodes.
  GraphBuilder b("through layout nodes");
  const int x = b.input({6, 5});
  const int p0 = b.permute(weight_gradient(b, x, b.input({6, 4}), true), {1, 0});
  const int p1 = b.reshape(b.reshape(weight_gradient(b, x, b.input({6, 4})), {5, 2, 2}), {5, 4});
  const int p2 = weight_gradient(b, x, b.input({6, 3}));
  const Graph g = b.finish({b.concat({p0, p1, p2}, 1)});
  const Graph fused = fuse(g);
  const ConcatAttr& a = only_concat(fused);
  ASSERT_EQ(a.placed.size(), 3u) << dump(fused);
  for (int p : a.placed)
    EXPECT_GE(p, 0) << dump(fused);
  for (Layout layout : {Layout::contiguous, Layout::column_major}) {
    const int64_t before = contract_stats().written_in_place;
    expect_fused_same(g, layout, 40, 8);
    EXPECT_EQ(contract_stats().written_in_place - before, 3) << testing::layout_name(layout);
  }
}

TEST(PlaceContractions, PiecesTheConcatMustCopy) {
  {
    // A piece read elsewhere too (an output) and one listed twice keep their own buffers;
    // the last piece is placed.
    GraphBuilder b("read elsewhere, listed twice");
    const int x = b.input({6, 8});
    const int shared = weight_gradient(b, x, b.input({6, 4}));
    const int twice = weight_gradient(b, x, b.input({6, 2}));
    const int placed = weight_gradient(b, x, b.input({6, 3}));
    const Graph g = b.finish({b.concat({shared, twice, twice, placed}, 1), shared});
    const Graph fused = fuse(g);
    const ConcatAttr& a = only_concat(fused);
    ASSERT_EQ(a.placed.size(), 4u) << dump(fused);
    EXPECT_EQ(a.placed[0], -1);
    EXPECT_EQ(a.placed[1], -1);
    EXPECT_EQ(a.placed[2], -1);
    EXPECT_GE(a.placed[3], 0);
    for (Layout layout : {Layout::contiguous, Layout::strided})
      expect_fused_same(g, layout, 50, 8);
  }
  {
    // (d f) = (8, 6) with f split into heads (2, 3) moved in front of d: the slot, taken back,
    // is no strided (8, 6) tensor (attention's dO is such a piece), so the concat copies it.
    GraphBuilder b("heads in front");
    const int x = b.input({6, 8});
    const int heads =
        b.permute(b.reshape(weight_gradient(b, x, b.input({6, 6})), {8, 2, 3}), {1, 0, 2});
    const int other = b.reshape(weight_gradient(b, x, b.input({6, 3})), {1, 8, 3});
    const Graph g = b.finish({b.concat({heads, other}, 0)});
    const Graph fused = fuse(g);
    const ConcatAttr& a = only_concat(fused);
    ASSERT_EQ(a.placed.size(), 2u) << dump(fused);
    EXPECT_EQ(a.placed[0], -1) << dump(fused);
    EXPECT_GE(a.placed[1], 0) << dump(fused);
    for (Layout layout : {Layout::contiguous, Layout::column_major})
      expect_fused_same(g, layout, 60, 8);
  }
}

}  // namespace
}  // namespace ein
