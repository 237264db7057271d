// Backward FLOPs from the graphs autodiff builds (compiler/autodiff/autodiff.h), split into input- and
// weight-gradient work and recomputation, against the lecture's counts and the backward rows
// of accounting_cases.tsv (op_backward_only_needed_grads, the math-backend SDPA rows, written
// as einsums and a softmax of reduce and map nodes). Exact matmul FLOPs throughout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "conformance/tsv.h"
#include "compiler/cost/graph_builder.h"

namespace ein {
namespace {

using testing::GraphBuilder;

int64_t tsv_value(const std::string& name) {
  for (const auto& row : testing::read_tsv(testing::conformance_file("accounting_cases.tsv")))
    if (row["case"] == name) return std::strtoll(row["expected value"].c_str(), nullptr, 10);
  ADD_FAILURE() << "no row " << name;
  return -1;
}

// The lecture's model (lecture-code-notebook.txt, gradients_flops): x --w1--> h1 --w2--> h2,
// loss = mean(h2²), with the notebook's CPU sizes.
constexpr int64_t B = 1024, D = 256, K = 64;

struct Lecture {
  GraphBuilder b;
  int h1 = -1, h2 = -1;
  Lecture() {
    const int x = b.input({B, D}), w1 = b.input({D, D}), w2 = b.input({D, K});
    h1 = b.einsum("b d, d e -> b e", {x, w1});
    h2 = b.einsum("b e, e k -> b k", {h1, w2});
    const int sq = b.map({h2}, {{0, 1}}, {B, K},
                         [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    b.output(b.reduce("b k ->", Reduction::mean, sq));
  }
};

TEST(BackwardCost, LectureForwardIsTwoBDKPerMatmul) {
  Lecture m;
  EXPECT_EQ(cost(m.b.graph()).total.matmul_flops, 2 * B * D * D + 2 * B * D * K);
}

TEST(BackwardCost, LectureBackwardWithoutXGrad) {
  Lecture m;
  const std::vector<bool> needs{false, true, true}, weights{false, true, true};
  const BackwardCost c =
      backward_cost(differentiate(m.b.graph(), needs, Recompute::none), m.b.graph(), weights);
  // w2.grad = h1ᵀ·h2.grad and h1.grad = h2.grad·w2ᵀ: 2·B·D·K each; w1.grad = xᵀ·h1.grad: 2·B·D·D.
  // x needs no gradient, so h1.grad·w1ᵀ is never built (the lecture counts (2+2)·B·D·D).
  EXPECT_EQ(c.weight_grad.matmul_flops, 2 * B * D * K + 2 * B * D * D);
  EXPECT_EQ(c.input_grad.matmul_flops, 2 * B * D * K);
  // Saved, not recomputed: the forward hands h1 and h2 over.
  EXPECT_EQ(c.recompute.flops, 0);
  EXPECT_EQ(c.total.matmul_flops, c.weight_grad.matmul_flops + c.input_grad.matmul_flops);
  // Under Recompute::full the backward recomputes h1 and h2, which the VJPs read, and saves
  // nothing but the inputs; the gradient work is the same.
  const BackwardCost full =
      backward_cost(differentiate(m.b.graph(), needs, Recompute::full), m.b.graph(), weights);
  EXPECT_EQ(full.recompute.matmul_flops, 2 * B * D * D + 2 * B * D * K);
  EXPECT_EQ(full.total.matmul_flops, full.weight_grad.matmul_flops +
                                         full.input_grad.matmul_flops +
                                         full.recompute.matmul_flops);
  EXPECT_EQ(full.weight_grad.matmul_flops, c.weight_grad.matmul_flops);
  EXPECT_EQ(full.input_grad.matmul_flops, c.input_grad.matmul_flops);
  EXPECT_EQ(full.saved_activations, 0);
  EXPECT_EQ(full.saved_total, (B * D + D * D + D * K) * 4);  // x, w1 and w2: h1 is rebuilt
  // Saved for backward: x, w2 (inputs) and h1, h2 (activations), f32.
  int h1_contract = 0;  // the node that holds h1's memory (m.h1 may be a view of it)
  while (m.b.graph().nodes[h1_contract].op != GraphOp::contract)
    ++h1_contract;
  EXPECT_EQ(c.saved_bytes[h1_contract], B * D * 4);
  EXPECT_EQ(c.saved_activations, (B * D + B * K) * 4);
  EXPECT_EQ(c.saved_total, (B * D + D * K + B * D + B * K) * 4);
}

TEST(BackwardCost, LectureWithXGradIsSixTokensTimesParams) {
  Lecture m;
  const std::vector<bool> needs{true, true, true}, weights{false, true, true};
  const BackwardCost c = backward_cost(differentiate(m.b.graph(), needs), m.b.graph(), weights);
  EXPECT_EQ(c.input_grad.matmul_flops, 2 * B * D * K + 2 * B * D * D);  // h1.grad, x.grad
  EXPECT_EQ(c.weight_grad.matmul_flops, 2 * B * D * K + 2 * B * D * D);
  const int64_t forward = cost(m.b.graph()).total.matmul_flops;
  const int64_t backward = c.input_grad.matmul_flops + c.weight_grad.matmul_flops;
  EXPECT_EQ(backward, 4 * B * D * K + (2 + 2) * B * D * D);  // the lecture's num_backward_flops
  const int64_t params = D * D + D * K, tokens = B;
  EXPECT_EQ(forward + backward, 6 * tokens * params);
}

TEST(BackwardCost, PhasesMarkReplicasAndTheVjpsOfWeights) {
  Lecture m;
  for (Recompute policy : {Recompute::full, Recompute::none}) {
    const Backward bw = differentiate(m.b.graph(), {false, true, true}, policy);
    const std::vector<CostPhase> phases = backward_phases(bw, m.b.graph(), {false, true, true});
    ASSERT_EQ(phases.size(), bw.graph.nodes.size());
    int replicas = 0, weight_contracts = 0;
    for (size_t i = 0; i < phases.size(); ++i) {
      if (bw.forward_of[i] >= 0) {
        EXPECT_EQ(phases[i], CostPhase::recompute) << i;
        ++replicas;
        continue;
      }
      weight_contracts +=
          bw.graph.nodes[i].op == GraphOp::contract && phases[i] == CostPhase::weight_grad;
    }
    EXPECT_EQ(replicas, bw.replicated);
    EXPECT_EQ(weight_contracts, 2) << recompute_name(policy);  // w1.grad and w2.grad
  }
}

// op_backward_only_needed_grads: a[4,5] requires grad; a@W (W no grad); expand to [7,4,6];
// bmm with [7,6,7] (no grad); sum().backward(): 240 + 240 + 2352 + 2352 = 5184.
TEST(BackwardCost, AccountingRowOnlyNeededGrads) {
  GraphBuilder b;
  const int a = b.input({4, 5}), w = b.input({5, 6}), c = b.input({7, 6, 7});
  const int t = b.einsum("i j, j k -> i k", {a, w});
  const int e = b.pattern("i k -> n i k", PatternOp::repeat, {t}, {{"n", 7}});
  const int r = b.einsum("n i k, n k j -> n i j", {e, c});
  b.output(b.reduce("n i j ->", Reduction::sum, r));
  const BackwardCost bc = backward_cost(differentiate(b.graph(), {true, false, false}), b.graph(),
                                        {false, false, false});
  const int64_t forward = cost(b.graph()).total.matmul_flops;
  EXPECT_EQ(forward, 240 + 2352);
  EXPECT_EQ(bc.input_grad.matmul_flops, 2352 + 240);
  EXPECT_EQ(bc.weight_grad.matmul_flops, 0);
  EXPECT_EQ(bc.recompute.matmul_flops, 0);  // no VJP reads a computed forward value
  EXPECT_EQ(forward + bc.input_grad.matmul_flops, tsv_value("op_backward_only_needed_grads"));
}

/// Scaled dot-product attention, causal, as einsums and a softmax of reduce and map nodes.
Graph sdpa(int64_t batch, int64_t heads, int64_t sq, int64_t sk, int64_t d) {
  GraphBuilder b;
  const int q = b.input({batch, heads, sq, d}), k = b.input({batch, heads, sk, d}),
            v = b.input({batch, heads, sk, d});
  const int s = b.einsum("b h q d, b h k d -> b h q k", {q, k});
  const Shape sshape{batch, heads, sq, sk};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // Scaled, and −inf above the diagonal (is_causal): where(k ≤ q, s·scale, −inf).
  const int masked = b.map({s}, {{0, 1, 2, 3}}, sshape, [&](Kernel& kn, auto& in) {
    const int keep = kn.apply(ScalarOp::le, kn.index(3), kn.index(2));
    const int scaled = kn.apply(ScalarOp::mul, in[0], kn.constant(scale));
    return kn.apply(ScalarOp::where, keep, scaled, kn.constant(-INFINITY));
  });
  const int m = b.reduce("b h q k -> b h q", Reduction::max, masked);
  const int e = b.map({masked, m}, {{0, 1, 2, 3}, {0, 1, 2}}, sshape, [](Kernel& kn, auto& in) {
    return kn.apply(ScalarOp::exp, kn.apply(ScalarOp::sub, in[0], in[1]));
  });
  const int z = b.reduce("b h q k -> b h q", Reduction::sum, e);
  const int p = b.map({e, z}, {{0, 1, 2, 3}, {0, 1, 2}}, sshape,
                      [](Kernel& kn, auto& in) { return kn.apply(ScalarOp::div, in[0], in[1]); });
  b.output(b.einsum("b h q k, b h k d -> b h q d", {p, v}));
  return b.graph();
}

// op_sdpa_*: FlopCounterMode counts 4·B·H·Sq·Sk·D forward (the causal mask not halved) and
// twice that for the math backend's backward (dQ, dK, dV, dP).
TEST(BackwardCost, AccountingRowsSdpa) {
  struct Row {
    const char* name;
    int64_t sq, sk;
  };
  for (const Row& row :
       {Row{"op_sdpa_fwd_bwd_math", 128, 128}, Row{"op_sdpa_fwd_bwd_nonsquare_math", 128, 256}}) {
    const Graph g = sdpa(4, 8, row.sq, row.sk, 64);
    const int64_t forward = cost(g).total.matmul_flops;
    if (row.sq == row.sk) {
      EXPECT_EQ(forward, tsv_value("op_sdpa_fwd_causal_counted_full"));
    }
    const BackwardCost c =
        backward_cost(differentiate(g, {true, true, true}), g, {false, false, false});
    EXPECT_EQ(c.input_grad.matmul_flops, 2 * forward) << row.name;
    EXPECT_EQ(forward + c.input_grad.matmul_flops, tsv_value(row.name)) << row.name;
  }
}

TEST(BackwardCost, AnOperandThatNeedsNoGradientCostsNothing) {
  GraphBuilder b;
  const int x = b.input({8, 16}), w = b.input({16, 4});
  b.output(b.einsum("b d, d k -> b k", {x, w}));
  const BackwardCost none =
      backward_cost(differentiate(b.graph(), {false, false}), b.graph(), {false, true});
  EXPECT_EQ(none.total, NodeCost{});
  const BackwardCost only_w =
      backward_cost(differentiate(b.graph(), {false, true}), b.graph(), {false, true});
  EXPECT_EQ(only_w.weight_grad.matmul_flops, 2 * 8 * 16 * 4);
  EXPECT_EQ(only_w.input_grad.matmul_flops, 0);
  EXPECT_EQ(only_w.saved_total, 8 * 16 * 4);  // x only: w's gradient does not read w
}

}  // namespace
}  // namespace ein
