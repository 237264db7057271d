// The cost model's rules, one op at a time, on graphs from the real lowering and on
// hand-built nodes; the op_* rows of accounting_cases.tsv that ein expresses without autograd
// (mm, the einsum/linear parts of op_mixed_sum); and the text table. Every number is exact:
// the conventions are in compiler/cost/cost_model.cpp and docs/cost_model.md.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>

#include "compiler/cost/cost_model.h"
#include "conformance/tsv.h"
#include "compiler/cost/graph_builder.h"

namespace ein {
namespace {

using testing::GraphBuilder;

constexpr int64_t kF32 = 4;

/// The expected value of an accounting_cases.tsv row, as an integer.
int64_t tsv_value(const std::string& name) {
  for (const auto& row : testing::read_tsv(testing::conformance_file("accounting_cases.tsv")))
    if (row["case"] == name) return std::strtoll(row["expected value"].c_str(), nullptr, 10);
  ADD_FAILURE() << "no row " << name;
  return -1;
}

TEST(CostModel, ContractIsTwoFlopsPerPointOfItsAxes) {
  GraphBuilder b;
  const int a = b.input({4, 5}), w = b.input({5, 6});
  b.output(b.einsum("a b, b c -> a c", {a, w}));
  const GraphCost c = cost(b.graph());
  // 2·4·5·6 FLOPs; reads A (20) and B (30), writes C (24), f32.
  EXPECT_EQ(c.total, (NodeCost{240, 240, 50 * kF32, 24 * kF32})) << format_cost(b.graph(), c);
  EXPECT_DOUBLE_EQ(c.total.intensity(), 240.0 / (74 * kF32));
}

TEST(CostModel, BatchedContractCountsTheBatchAxis) {
  GraphBuilder b;
  const int x = b.input({7, 4, 6}), y = b.input({7, 6, 7});
  b.output(b.einsum("b i j, b j k -> b i k", {x, y}));
  const GraphCost c = cost(b.graph());
  EXPECT_EQ(c.total.matmul_flops, 2 * 7 * 4 * 6 * 7) << format_cost(b.graph(), c);
  EXPECT_EQ(c.total.flops, c.total.matmul_flops);
}

TEST(CostModel, ARepeatedOperandIsReadAtItsOwnSize) {
  GraphBuilder b;
  const int t = b.input({4, 6}), c = b.input({7, 6, 7});
  const int e = b.pattern("i k -> n i k", PatternOp::repeat, {t}, {{"n", 7}});  // stride 0 on n
  b.output(b.einsum("n i k, n k j -> n i j", {e, c}));
  const GraphCost cc = cost(b.graph());
  EXPECT_EQ(cc.total, (NodeCost{2352, 2352, (24 + 294) * kF32, 7 * 4 * 7 * kF32}))
      << format_cost(b.graph(), cc);
}

// roofline_matmul_intensity: bf16 n×n @ n×n, n = 1024: bytes 3·2n², FLOPs ≈ 2n³ → ~n/3 = 341
// (the row's n²(2n − 1) counts n − 1 adds per output; 2 per multiply-add gives exactly n/3).
TEST(CostModel, AccountingRowRooflineMatmulIntensity) {
  constexpr int64_t n = 1024;
  GraphBuilder b;
  b.output(
      b.einsum("i k, k j -> i j", {b.input({n, n}, DType::bf16), b.input({n, n}, DType::bf16)}));
  const GraphCost c = cost(b.graph());
  EXPECT_EQ(c.total, (NodeCost{2 * n * n * n, 2 * n * n * n, 2 * n * n * 2, n * n * 2}));
  EXPECT_DOUBLE_EQ(c.total.intensity(), n / 3.0);
  EXPECT_EQ(static_cast<int64_t>(c.total.intensity()), 341);
}

TEST(CostModel, AccountingRowOpMm) {
  GraphBuilder b;
  b.output(b.einsum("m k, k n -> m n", {b.input({4, 5}), b.input({5, 6})}));
  EXPECT_EQ(cost(b.graph()).total.matmul_flops, tsv_value("op_mm_flops"));
}

// op_mixed_sum: mm 4x5x6 + addmm 4x5x6 + matmul 5x6x7 + einsum ab,bc 6x7x8 + Linear(9->10) on
// [8,9]. FlopCounterMode counts the matmul part of addmm and Linear (not the bias add); so
// does matmul_flops, while flops also has the two bias adds.
TEST(CostModel, AccountingRowOpMixedSum) {
  GraphBuilder b;
  const int mm = b.einsum("m k, k n -> m n", {b.input({4, 5}), b.input({5, 6})});
  const int addmm_mm = b.einsum("m k, k n -> m n", {b.input({4, 5}), b.input({5, 6})});
  const int bias1 = b.input({6});
  const int addmm = b.map({addmm_mm, bias1}, {{0, 1}, {1}}, {4, 6},
                          [](Kernel& k, auto& in) { return k.apply(ScalarOp::add, in[0], in[1]); });
  const int matmul = b.einsum("m k, k n -> m n", {b.input({5, 6}), b.input({6, 7})});
  const int ab_bc = b.einsum("a b, b c -> a c", {b.input({6, 7}), b.input({7, 8})});
  const int lin_mm = b.einsum("b i, o i -> b o", {b.input({8, 9}), b.input({10, 9})});
  const int bias2 = b.input({10});
  const int linear = b.map({lin_mm, bias2}, {{0, 1}, {1}}, {8, 10}, [](Kernel& k, auto& in) {
    return k.apply(ScalarOp::add, in[0], in[1]);
  });
  for (int o : {mm, addmm, matmul, ab_bc, linear})
    b.output(o);
  const GraphCost c = cost(b.graph());
  EXPECT_EQ(c.total.matmul_flops, tsv_value("op_mixed_sum")) << format_cost(b.graph(), c);
  EXPECT_EQ(c.total.flops, 3012 + 4 * 6 + 8 * 10);  // + one add per bias-add output element
}

TEST(CostModel, MapCountsArithmeticNodesPerOutputElement) {
  GraphBuilder b;
  const int x = b.input({4, 6}), y = b.input({6});
  // (x - y)² · 2: sub, square, mul are arithmetic; the loads and the constant are not.
  b.output(b.map({x, y}, {{0, 1}, {1}}, {4, 6}, [](Kernel& k, auto& in) {
    const int d = k.apply(ScalarOp::sub, in[0], in[1]);
    return k.apply(ScalarOp::mul, k.apply(ScalarOp::square, d), k.constant(2));
  }));
  const GraphCost c = cost(b.graph());
  // Reads x (24) and the broadcast y once (6, not 24); writes 24.
  EXPECT_EQ(c.total, (NodeCost{3 * 24, 0, 30 * kF32, 24 * kF32})) << format_cost(b.graph(), c);
}

struct ReduceCase {
  Reduction reduction;
  int64_t flops;  // input [6, 10] reduced over its last dim: 60 in, 6 out
};

TEST(CostModel, ReduceRulesPerReduction) {
  const ReduceCase cases[] = {
      {Reduction::sum, 60},
      {Reduction::max, 60},
      {Reduction::min, 60},
      {Reduction::prod, 60},
      {Reduction::mean, 66},
      {Reduction::logsumexp, 4 * 60 + 2 * 6},
      {Reduction::var, 4 * 60 + 2 * 6},
      {Reduction::std, 4 * 60 + 3 * 6},
  };
  for (const ReduceCase& rc : cases) {
    GraphBuilder b;
    b.output(b.reduce("a b -> a", rc.reduction, b.input({6, 10})));
    const GraphCost c = cost(b.graph());
    EXPECT_EQ(c.total, (NodeCost{rc.flops, 0, 60 * kF32, 6 * kF32}))
        << reduction_name(rc.reduction) << "\n"
        << format_cost(b.graph(), c);
  }
}

TEST(CostModel, ViewsAndViewReshapesAreFree) {
  GraphBuilder b;
  const int x = b.input({2, 3, 8});
  b.output(b.pattern("b s (h d) -> b h s d", PatternOp::rearrange, {x}, {{"h", 4}}));
  b.output(b.pattern("b s d -> b (s d)", PatternOp::rearrange, {x}));
  b.output(b.pattern("b s d -> b s d r", PatternOp::repeat, {x}, {{"r", 3}}));
  const GraphCost c = cost(b.graph());
  EXPECT_EQ(c.total, NodeCost{}) << format_cost(b.graph(), c);
}

TEST(CostModel, AReshapeOfAPermutedViewIsACopy) {
  GraphBuilder b;
  b.output(b.pattern("a b -> (b a)", PatternOp::rearrange, {b.input({3, 4})}));
  const GraphCost c = cost(b.graph());
  EXPECT_EQ(c.total, (NodeCost{0, 0, 12 * kF32, 12 * kF32})) << format_cost(b.graph(), c);
}

TEST(CostModel, ConcatAndCastMoveBytesOnly) {
  GraphBuilder b;
  const int x = b.input({2, 3}), y = b.input({2, 5});
  const int cat = b.concat({x, y}, 1);
  const int half = b.cast(cat, DType::bf16);
  b.output(half);
  const Graph& g = b.graph();
  EXPECT_EQ(node_cost(g, cat), (NodeCost{0, 0, 16 * kF32, 16 * kF32}));
  EXPECT_EQ(node_cost(g, half), (NodeCost{0, 0, 16 * kF32, 16 * 2}));
  EXPECT_EQ(node_cost(g, x), NodeCost{});
}

// A fused softmax kernel in Kernel IR's general form over domain [4, 10] (row: the last dim):
// stage max(x), stage Σ exp(x − m), store exp(x − m) / s at every point.
TEST(CostModel, FusedKernelCountsEachNodeWhereItIsEvaluated) {
  auto k = std::make_shared<Kernel>();
  k->domain = {4, 10};
  k->reduced = 1;
  const int xb = k->add_buffer(DType::f32, {10, 1});
  const int yb = k->add_output(DType::f32, {10, 1});
  const int x = k->load(xb);
  const int m = k->reduce(Combine::max, x);
  const int e = k->apply(ScalarOp::exp, k->apply(ScalarOp::sub, x, m));
  const int s = k->reduce(Combine::sum, e);
  k->store(yb, k->apply(ScalarOp::div, e, s));
  GraphBuilder b;
  const int in = b.input({4, 10});
  FusedAttr attr;
  attr.kernel = k;
  attr.reads = {FusedRead{0, {{1, 0}, {0, 1}}, {0, 0}}};
  FusedOutput& out = attr.outputs.emplace_back();
  out.shape = {4, 10};
  out.dims = {0, 1};
  const int fused = b.add(GraphOp::fused, {in}, {4, 10}, DType::f32, std::move(attr));
  const int result = b.add(GraphOp::result, {fused}, {4, 10}, DType::f32, ResultAttr{0});
  const Graph& g = b.graph();
  // 2 stages × 40 combines + sub, exp, div at 40 points each.
  EXPECT_EQ(node_cost(g, fused), (NodeCost{2 * 40 + 3 * 40, 0, 40 * kF32, 40 * kF32}));
  EXPECT_EQ(node_cost(g, result), NodeCost{});
}

TEST(CostModel, TableStatesTheConventionAndOneRowPerNode) {
  GraphBuilder b("a b, b c -> a c");
  b.output(b.einsum("a b, b c -> a c", {b.input({4, 5}), b.input({5, 6})}));
  const std::string text = format_cost(b.graph(), cost(b.graph()));
  EXPECT_NE(text.find("FLOPs: 2 per multiply-add"), std::string::npos) << text;
  size_t lines = 0;
  for (char ch : text)
    lines += ch == '\n';
  EXPECT_EQ(lines, b.graph().nodes.size() + 3) << text;  // title, header, nodes, total
  EXPECT_NE(text.find("total"), std::string::npos);
  EXPECT_NE(text.find(" 240 "), std::string::npos) << text;
}

// Where each op_* row of accounting_cases.tsv is checked, or why it is not.
TEST(AccountingCases, EveryOpRowIsCoveredOrSkippedWithAReason) {
  const std::map<std::string, std::string> covered = {
      {"op_mm_flops", "CostModel.AccountingRowOpMm, FlopCounter.MmCountsTheRowAndOneBlasLaunch"},
      {"op_mixed_sum",
       "CostModel.AccountingRowOpMixedSum, FlopCounter.MixedSumAgreesWithTorchsMatmulCount"},
      {"op_backward_only_needed_grads",
       "BackwardCost.AccountingRowOnlyNeededGrads, EagerFlops.AccountingRowOnlyNeededGrads"},
      {"op_sdpa_fwd_causal_counted_full", "BackwardCost.AccountingRowsSdpa"},
      {"op_sdpa_fwd_bwd_math", "BackwardCost.AccountingRowsSdpa"},
      {"op_sdpa_fwd_bwd_nonsquare_math", "BackwardCost.AccountingRowsSdpa"},
  };
  const std::map<std::string, std::string> skipped = {
      {"op_conv2d_flops", "ein has no convolution op"},
      {"op_conv1d_flops", "ein has no convolution op"},
  };
  int rows = 0;
  for (const auto& row : testing::read_tsv(testing::conformance_file("accounting_cases.tsv"))) {
    const std::string& name = row["case"];
    if (name.rfind("op_", 0) != 0) continue;
    ++rows;
    EXPECT_EQ(covered.count(name) + skipped.count(name), 1u) << "line " << row.line << ": " << name;
    if (skipped.count(name)) std::cout << "skipped " << name << ": " << skipped.at(name) << "\n";
  }
  EXPECT_EQ(rows, static_cast<int>(covered.size() + skipped.size()));
}

}  // namespace
}  // namespace ein
