// Graph IR and Kernel IR as text: what lowering produces for each pattern op (golden dumps),
// what coalescing and verification guarantee, and that the emitted MLIR depends on the stride
// pattern but not on sizes (one compiled kernel per pattern of strides).
#include <gtest/gtest.h>

#include <stdexcept>

#include "compiler/emit/emit_mlir.h"
#include "compiler/graph/graph.h"
#include "compiler/kernel/kernel_ir.h"
#include "compiler/graph/lower_patterns.h"
#include <ein/pattern_cache.h>

namespace ein {
namespace {

Graph lower(const std::string& pattern, PatternOp op, std::vector<Shape> shapes,
            std::vector<AxisSize> sizes = {}, Reduction r = Reduction::none) {
  ResolveRequest req;
  req.op = op;
  req.reduction = r;
  req.shapes = shapes;
  req.sizes = std::move(sizes);
  const auto recipe = resolve_cached(pattern, req);
  std::vector<TensorType> types;
  for (const Shape& s : shapes) types.push_back({s, DType::f32});
  return lower_pattern(*recipe, types, std::nullopt, 0, pattern);
}

TEST(GraphIr, RearrangeIsAViewThenAReshape) {
  EXPECT_EQ(dump(lower("b s (h d) -> b h s d", PatternOp::rearrange, {{2, 3, 8}}, {{"h", 4}})),
            "graph b s (h d) -> b h s d\n"
            "  %0 = input[0]  : f32[2, 3, 8]\n"
            "  %1 = view[split (2) (3) (4 2) -> {0} {2} {1} {3}] %0 : f32[2, 4, 3, 2]\n"
            "  %2 = reshape %1 : f32[2, 4, 3, 2]\n"
            "  return %2\n");
}

TEST(GraphIr, RepeatAddsAStrideZeroAxis) {
  const std::string text = dump(lower("h w -> h w c", PatternOp::repeat, {{2, 3}}, {{"c", 5}}));
  EXPECT_NE(text.find("view[split (2) (3) -> {0} {1} {}]"), std::string::npos) << text;
}

TEST(GraphIr, ReduceKeepsOutputOrderThenPermutes) {
  EXPECT_EQ(dump(lower("a b c -> c a", PatternOp::reduce, {{2, 3, 4}}, {}, Reduction::mean)),
            "graph a b c -> c a\n"
            "  %0 = input[0]  : f32[2, 3, 4]\n"
            "  %1 = view[split (2) (3) (4) -> {0} {1} {2}] %0 : f32[2, 3, 4]\n"
            "  %2 = reduce[mean dims 1] %1 : f32[2, 4]\n"
            "  %3 = permute[1,0] %2 : f32[4, 2]\n"
            "  %4 = reshape %3 : f32[4, 2]\n"
            "  return %4\n");
}

TEST(GraphIr, EinsumPlansPairwiseContractions) {
  const Graph g = lower("a b, b c, c d -> a d", PatternOp::einsum, {{2, 30}, {30, 40}, {40, 5}});
  int contractions = 0;
  for (const GraphNode& n : g.nodes) contractions += n.op == GraphOp::contract ? 1 : 0;
  EXPECT_EQ(contractions, 2) << dump(g);
  EXPECT_NO_THROW(verify(g));
}

TEST(GraphIr, VerifyRejectsAnInputThatIsNotEarlier) {
  Graph g;
  GraphNode n;
  n.op = GraphOp::permute;
  n.inputs = {0};
  n.attr = PermuteAttr{{0}};
  g.add(n);
  EXPECT_THROW(verify(g), std::logic_error);
}

Kernel copy_kernel(Shape domain, Shape in, Shape out) {
  Kernel k;
  k.name = "copy";
  k.domain = std::move(domain);
  const int x = k.add_buffer(DType::f32, std::move(in));
  k.add_buffer(DType::f32, std::move(out), true);
  k.body = k.result = k.load(x);
  return k;
}

TEST(KernelIr, CoalesceMergesWhatEveryBufferWalksAsOne) {
  // (2, 3, 4) contiguous on both sides: one dim of 24.
  Kernel k = coalesce(copy_kernel({2, 3, 4}, {12, 4, 1}, {12, 4, 1}));
  EXPECT_EQ(k.domain, (Shape{24}));
  // A transpose of the last two dims: nothing merges but the size-1 dim goes.
  k = coalesce(copy_kernel({2, 1, 3, 4}, {12, 12, 1, 3}, {12, 12, 4, 1}));
  EXPECT_EQ(k.domain, (Shape{2, 3, 4}));
  EXPECT_EQ(k.buffers[0].strides, (Shape{12, 1, 3}));
}

TEST(KernelIr, CoalesceKeepsAReducedDimWhenAllAreSizeOne) {
  Kernel k = copy_kernel({5, 1}, {1, 0}, {1, 0});
  k.reduced = 1;
  k.combine = Combine::sum;
  k.result = k.accumulator();
  k = coalesce(k);
  EXPECT_EQ(k.reduced, 1);
  EXPECT_EQ(k.domain, (Shape{5, 1}));
  EXPECT_NO_THROW(verify(k));
}

TEST(KernelIr, VerifyRejectsBrokenKernels) {
  Kernel k = copy_kernel({4}, {1}, {1});
  k.buffers.back().output = false;
  EXPECT_THROW(verify(k), std::logic_error);
  k = copy_kernel({4}, {1}, {1});
  k.reduced = 1;  // a reduced dim without a combine
  EXPECT_THROW(verify(k), std::logic_error);
  k = copy_kernel({4}, {1}, {1});
  k.apply(ScalarOp::add, 0, 5);  // reads a node that is not before it
  EXPECT_THROW(verify(k), std::logic_error);
}

TEST(EmitMlir, SizesAreReadAtRunTimeSoTheTextIsShapeGeneric) {
  Kernel small = coalesce(copy_kernel({2, 3, 8}, {24, 1, 3}, {24, 8, 1}));
  Kernel large = coalesce(copy_kernel({7, 50, 96}, {4800, 1, 50}, {4800, 96, 1}));
  const std::string a = emit_mlir(small, schedule_cpu(small), "k");
  const std::string b = emit_mlir(large, schedule_cpu(large), "k");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.find("arith.constant 50 "), std::string::npos);
}

TEST(EmitMlir, ContiguousMapsAreVectorizedAndReductionsKeepFourAccumulators) {
  Kernel map = copy_kernel({1000}, {1}, {1});
  map.body = map.result = map.apply(ScalarOp::exp, map.body);
  const CpuSchedule s = schedule_cpu(map);
  EXPECT_EQ(s.vector_dim, 0);
  EXPECT_EQ(s.vector_width, 16);  // 64 bytes of f32
  EXPECT_NE(emit_mlir(map, s, "k").find("math.exp %v"), std::string::npos);
  EXPECT_NE(emit_mlir(map, s, "k").find("vector<16xf32>"), std::string::npos);

  Kernel sum = copy_kernel({8, 1000}, {1000, 1}, {1, 0});
  sum.reduced = 1;
  sum.combine = Combine::sum;
  sum.result = sum.accumulator();
  const std::string text = emit_mlir(sum, schedule_cpu(sum), "k");
  EXPECT_NE(text.find(":4 = scf.for"), std::string::npos) << text;
  EXPECT_NE(text.find("vector.reduction <add>"), std::string::npos) << text;
}

}  // namespace
}  // namespace ein
