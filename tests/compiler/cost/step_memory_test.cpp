// Liveness of a training step (compiler/cost/step_memory.h) on the lecture's two-layer model, whose
// forward and backward graphs are small enough to follow by hand.
#include <gtest/gtest.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "compiler/cost/step_memory.h"
#include "compiler/cost/graph_builder.h"

namespace ein {
namespace {

using testing::GraphBuilder;

constexpr int64_t B = 64, D = 32, K = 8;

// x --w1--> h1 --w2--> h2, loss = mean(h2²).
struct Lecture {
  GraphBuilder b;
  Lecture() {
    const int x = b.input({B, D}), w1 = b.input({D, D}), w2 = b.input({D, K});
    const int h1 = b.einsum("b d, d e -> b e", {x, w1});
    const int h2 = b.einsum("b e, e k -> b k", {h1, w2});
    const int sq = b.map({h2}, {{0, 1}}, {B, K},
                         [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    b.output(b.reduce("b k ->", Reduction::mean, sq));
  }
};

// Forward: h1 (B·D), h2 (B·K), h2² (B·K), the loss (4 B). The backward reads h1 (for w2's
// gradient) and h2 (for h2²'s VJP), so both outlive the forward; h2² dies at the mean.
// Backward: dmean (B·K), dh2 = 2·h2·dmean (B·K), dh1 = dh2·w2ᵀ (B·D); w1.grad and w2.grad are
// gradients (the ledger's), not activations. The peak is at dh1: h1, dh2 and dh1 live.
TEST(StepMemory, LectureModelByHand) {
  Lecture m;
  const Backward back = differentiate(m.b.graph(), {false, true, true}, Recompute::none);
  const StepMemory s = step_memory(m.b.graph(), back);
  EXPECT_EQ(s.at_boundary, (B * D + B * K) * 4 + 4);
  EXPECT_EQ(s.peak, (B * D + B * K + B * D) * 4);
  ASSERT_TRUE(s.peak_in_backward);
  const GraphNode& at = back.graph.nodes[s.peak_node];
  EXPECT_EQ(at.op, GraphOp::contract);
  EXPECT_EQ(at.shape, (Shape{B, D}));
  // Per forward node allocations: the two contractions, the square and the mean; no views.
  int64_t allocated = 0;
  for (int64_t bytes : s.forward_bytes) allocated += bytes;
  EXPECT_EQ(allocated, (B * D + 2 * B * K) * 4 + 4);
}

// What the forward keeps for the backward is what backward_cost counts as saved (plus the
// loss, a forward output), from an independent walk of the same graphs.
TEST(StepMemory, BoundaryIsSavedActivationsPlusOutputs) {
  Lecture m;
  for (const std::vector<bool>& needs : {std::vector<bool>{false, true, true}, std::vector<bool>{true, true, true},
                                         std::vector<bool>{false, false, true}}) {
    for (Recompute policy : {Recompute::none, Recompute::automatic, Recompute::full}) {
      const Backward back = differentiate(m.b.graph(), needs, policy);
      const BackwardCost c = backward_cost(back, m.b.graph(), {false, true, true});
      const StepMemory s = step_memory(m.b.graph(), back);
      EXPECT_EQ(s.at_boundary, c.saved_activations + 4) << recompute_name(policy);
      EXPECT_GE(s.peak, s.at_boundary);
    }
  }
}

}  // namespace
}  // namespace ein
