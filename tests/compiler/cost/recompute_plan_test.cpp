// The save/recompute plans of autodiff (compiler/autodiff/autodiff.h, include/ein/autograd.h's
// Recompute) on small models whose plans can be followed by hand: what each policy saves, what
// it rebuilds, that no default plan recomputes a contraction, that checkpointing blocks keeps
// only the values a block hands on, and that the liveness peak follows the policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "compiler/cost/graph_builder.h"
#include "compiler/cost/step_memory.h"
#include "compiler/fuse/fuse.h"
#include "compiler/pipeline.h"

namespace ein {
namespace {

using testing::GraphBuilder;

constexpr int64_t B = 64, D = 32, F = 128;

int gelu(GraphBuilder& b, int x, Shape shape) {
  return b.map({x}, {{0, 1}}, std::move(shape),
               [](Kernel& k, auto& in) { return k.apply(ScalarOp::gelu_tanh, in[0]); });
}

/// x --w1--> h --gelu--> g --w2--> y, loss = mean(y²); inputs x, w1, w2.
struct Mlp {
  GraphBuilder b;
  int h = -1, g = -1, y = -1;
  explicit Mlp(DType dtype = DType::f32) {
    const int x = b.input({B, D}, dtype), w1 = b.input({D, F}, dtype), w2 = b.input({F, D}, dtype);
    h = b.einsum("b d, d f -> b f", {x, w1});
    g = gelu(b, h, {B, F});
    y = b.einsum("b f, f d -> b d", {g, w2});
    const int sq = b.map({y}, {{0, 1}}, {B, D},
                         [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    b.output(b.reduce("b d ->", Reduction::mean, sq));
  }
};

/// The node that holds the memory of `id` (views followed to their operand).
int storage(const Graph& g, int id) {
  while (g.nodes[id].op == GraphOp::view || g.nodes[id].op == GraphOp::reshape ||
         g.nodes[id].op == GraphOp::permute || g.nodes[id].op == GraphOp::slice)
    id = g.nodes[id].inputs[0];
  return id;
}

/// The forward nodes a plan saves, by the node that holds their memory.
std::vector<int> saved_storage(const Backward& b, const Graph& forward) {
  std::vector<int> out;
  for (int f : b.saved)
    out.push_back(storage(forward, f));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const std::vector<bool> kWeights{false, true, true};

TEST(RecomputePlan, NoneSavesWhatTheGradientsReadAndRecomputesNothing) {
  Mlp m;
  const Graph& g = m.b.graph();
  const Backward b = differentiate(g, kWeights, Recompute::none);
  // w2.grad reads g, gelu's VJP reads h, the square's VJP reads y.
  EXPECT_EQ(saved_storage(b, g),
            (std::vector<int>{storage(g, m.h), storage(g, m.g), storage(g, m.y)}));
  const BackwardCost c = backward_cost(b, g, kWeights);
  EXPECT_EQ(c.recompute.flops, 0);
  EXPECT_EQ(c.saved_activations, (B * F + B * F + B * D) * 4);
  // The saved inputs follow the cotangent inputs, in forward order.
  EXPECT_EQ(b.saved_base, 3 + 1);
  EXPECT_TRUE(std::is_sorted(b.saved.begin(), b.saved.end()));
  for (size_t k = 0; k < b.saved.size(); ++k) {
    bool found = false;
    for (const GraphNode& n : b.graph.nodes)
      found = found || (n.op == GraphOp::input &&
                        std::get<InputAttr>(n.attr).index == b.saved_base + static_cast<int>(k));
    EXPECT_TRUE(found) << "saved value " << k << " has no input node";
  }
}

TEST(RecomputePlan, AutoRebuildsTheGeluFromTheSavedMatmulNeverAContraction) {
  Mlp m;
  const Graph& g = m.b.graph();
  const Backward b = differentiate(g, kWeights, Recompute::automatic);
  // g = gelu(h) is rebuilt from h, which gelu's VJP needs anyway: one B·F tensor fewer.
  EXPECT_EQ(saved_storage(b, g), (std::vector<int>{storage(g, m.h), storage(g, m.y)}));
  const BackwardCost c = backward_cost(b, g, kWeights);
  EXPECT_EQ(c.recompute.matmul_flops, 0);
  EXPECT_GT(c.recompute.flops, 0);  // the gelu, B·F elements
  EXPECT_EQ(c.saved_activations, (B * F + B * D) * 4);
  const BackwardCost none = backward_cost(differentiate(g, kWeights, Recompute::none), g, kWeights);
  EXPECT_LT(c.saved_activations, none.saved_activations);
  EXPECT_LE(step_memory(g, b).peak, step_memory(g, differentiate(g, kWeights, Recompute::none)).peak);
}

// A 16-bit saved value may have been an f32 value inside a forward kernel, rounded only to be
// saved: a map rebuilt from it would differ from the forward's (fp16 training skipped 16 of 60
// steps for overflow when LayerNorm's variance was rebuilt from f16 moments, 1 when saved).
TEST(RecomputePlan, AutoRebuildsNothingFromA16BitSavedValue) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Mlp m(dtype);
    const Graph& g = m.b.graph();
    const Backward b = differentiate(g, kWeights, Recompute::automatic);
    EXPECT_EQ(saved_storage(b, g),
              (std::vector<int>{storage(g, m.h), storage(g, m.g), storage(g, m.y)}))
        << dtype_name(dtype);
    EXPECT_EQ(backward_cost(b, g, kWeights).recompute.flops, 0);
  }
}

// Mixed precision: f32 weights read as bf16. The backward's contractions read a weight's cast
// materialised, so auto saves it (as PyTorch's autocast caches it) instead of casting the f32
// weight again every step; the cast of the data input, which gets no gradient, is rebuilt.
TEST(RecomputePlan, AutoSavesAParametersCastButRebuildsTheDataInputs) {
  GraphBuilder b;
  const int x = b.input({B, D}), w1 = b.input({D, F}), w2 = b.input({F, D});
  const int xb = b.cast(x, DType::bf16), w1b = b.cast(w1, DType::bf16),
            w2b = b.cast(w2, DType::bf16);
  const int h = b.einsum("b d, d f -> b f", {xb, w1b});
  const int y = b.einsum("b f, f d -> b d", {gelu(b, h, {B, F}), w2b});
  const int sq = b.map({b.cast(y, DType::f32)}, {{0, 1}}, {B, D},
                       [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
  b.output(b.reduce("b d ->", Reduction::mean, sq));
  const Graph& g = b.graph();
  const Backward automatic = differentiate(g, kWeights, Recompute::automatic);
  const std::vector<int> saved = saved_storage(automatic, g);
  // dh = dy·w2bᵀ reads w2's cast; w1's gradient reads x's cast (w1's cast is read by nothing:
  // x gets no gradient).
  EXPECT_TRUE(std::binary_search(saved.begin(), saved.end(), storage(g, w2b)));
  EXPECT_FALSE(std::binary_search(saved.begin(), saved.end(), storage(g, xb)));
  EXPECT_FALSE(std::binary_search(saved.begin(), saved.end(), storage(g, w1b)));
  // The weight's cast is saved under none as well: auto never saves more than none.
  const std::vector<int> none = saved_storage(differentiate(g, kWeights, Recompute::none), g);
  EXPECT_TRUE(std::binary_search(none.begin(), none.end(), storage(g, w2b)));
  EXPECT_TRUE(std::binary_search(none.begin(), none.end(), storage(g, xb)));
  EXPECT_LT(backward_cost(automatic, g, kWeights).saved_activations,
            backward_cost(differentiate(g, kWeights, Recompute::none), g, kWeights)
                .saved_activations);
  // ZeRO 3 (save_parameter_casts = false): the backward casts the fetched weight again.
  const Backward zero3 = differentiate(g, kWeights, Recompute::automatic, {}, false);
  const std::vector<int> saved3 = saved_storage(zero3, g);
  EXPECT_FALSE(std::binary_search(saved3.begin(), saved3.end(), storage(g, w2b)));
  EXPECT_EQ(backward_cost(zero3, g, kWeights).saved_activations +
                static_cast<int64_t>(F * D * element_size(DType::bf16)),
            backward_cost(automatic, g, kWeights).saved_activations);
}

/// h = x·w0, then a LayerNorm as stdlib/nn.ein writes it, then y = ln·w1, loss = mean(y²);
/// inputs x, w0, gamma, beta, w1.
struct LayerNormMlp {
  GraphBuilder b;
  int h = -1, ln = -1, y = -1;
  LayerNormMlp() {
    const int x = b.input({B, D}), w0 = b.input({D, D}), gamma = b.input({D}),
              beta = b.input({D}), w1 = b.input({D, D});
    h = b.einsum("b d, e d -> b e", {x, w0});
    const auto binary = [&](ScalarOp op, int u, int v, std::vector<int> v_axes) {
      return b.map({u, v}, {{0, 1}, std::move(v_axes)}, {B, D},
                   [op](Kernel& k, auto& in) { return k.apply(op, in[0], in[1]); });
    };
    const int mu = b.reduce("b d -> b", Reduction::mean, h);
    const int centred = binary(ScalarOp::sub, h, mu, {0});
    const int sq = b.map({centred}, {{0, 1}}, {B, D},
                         [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    const int var = b.reduce("b d -> b", Reduction::mean, sq);
    const int r = b.map({var}, {{0}}, {B}, [](Kernel& k, auto& in) {
      return k.apply(ScalarOp::rsqrt, k.apply(ScalarOp::add, in[0], k.constant(1e-5)));
    });
    const int normed = binary(ScalarOp::mul, binary(ScalarOp::sub, h, mu, {0}), r, {0});
    // normed·gamma is read by no VJP (the add passes its gradient through): it is not saved,
    // so the LayerNorm's output is rebuilt through it or not at all.
    ln = binary(ScalarOp::add, binary(ScalarOp::mul, normed, gamma, {1}), beta, {1});
    y = b.einsum("b d, d e -> b e", {ln, w1});
    const int sq_y = b.map({y}, {{0, 1}}, {B, D},
                           [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    b.output(b.reduce("b d ->", Reduction::mean, sq_y));
  }
};

// w1's gradient reads the LayerNorm's output, which auto rebuilds from h and the row
// statistics through the maps between them, one of them saved by nobody: a (B, D) tensor less
// (a byte-level GPT at T = 512 saves 313.1 MB under auto without this, 258.6 MB with it).
TEST(RecomputePlan, AutoRebuildsALayerNormOutputThroughElementwiseValuesNobodySaves) {
  LayerNormMlp m;
  const Graph& g = m.b.graph();
  const std::vector<bool> weights{false, true, true, true, true};
  const Backward none = differentiate(g, weights, Recompute::none);
  const Backward automatic = differentiate(g, weights, Recompute::automatic);
  const std::vector<int> saved_none = saved_storage(none, g), saved_auto = saved_storage(automatic, g);
  EXPECT_TRUE(std::binary_search(saved_none.begin(), saved_none.end(), storage(g, m.ln)));
  EXPECT_FALSE(std::binary_search(saved_auto.begin(), saved_auto.end(), storage(g, m.ln)));
  EXPECT_TRUE(std::binary_search(saved_auto.begin(), saved_auto.end(), storage(g, m.h)));
  const BackwardCost c = backward_cost(automatic, g, weights);
  EXPECT_EQ(c.recompute.matmul_flops, 0);
  // h and y (B·D each) and the two row statistics (B each) are all auto saves.
  EXPECT_EQ(c.saved_activations, (2 * B * D + 2 * B) * 4);
  EXPECT_LT(step_memory(g, automatic).peak, step_memory(g, none).peak);
}

TEST(RecomputePlan, FullRecomputesTheForwardAndSavesNothing) {
  Mlp m;
  const Graph& g = m.b.graph();
  const Backward b = differentiate(g, kWeights, Recompute::full);
  EXPECT_TRUE(b.saved.empty());
  const BackwardCost c = backward_cost(b, g, kWeights);
  EXPECT_EQ(c.saved_activations, 0);
  EXPECT_EQ(c.recompute.matmul_flops, cost(g).total.matmul_flops);  // both matmuls again
}

/// Two blocks x ← x + gelu(x·u_k)·v_k, then loss = mean(x²); `blocks` labels each node.
struct Blocks {
  GraphBuilder b;
  std::vector<int> blocks;
  std::vector<int> outputs;  // each block's result x_k
  Blocks() {
    int x = b.input({B, D});
    std::vector<int> weights;
    for (int k = 0; k < 2; ++k) {
      weights.push_back(b.input({D, F}));
      weights.push_back(b.input({F, D}));
    }
    label(-1);
    for (int k = 0; k < 2; ++k) {
      const int h = b.einsum("b d, d f -> b f", {x, weights[2 * k]});
      const int y = b.einsum("b f, f d -> b d", {gelu(b, h, {B, F}), weights[2 * k + 1]});
      x = b.map({x, y}, {{0, 1}, {0, 1}}, {B, D},
                [](Kernel& kn, auto& in) { return kn.apply(ScalarOp::add, in[0], in[1]); });
      outputs.push_back(x);
      label(k);
    }
    const int sq = b.map({x}, {{0, 1}}, {B, D},
                         [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    b.output(b.reduce("b d ->", Reduction::mean, sq));
    label(-1);
  }
  /// Labels the nodes made since the last call.
  void label(int block) { blocks.resize(b.graph().nodes.size(), block); }
};

const std::vector<bool> kBlockWeights{false, true, true, true, true};

TEST(RecomputePlan, BlocksSaveOnlyWhatEachBlockHandsOn) {
  Blocks m;
  const Graph& g = m.b.graph();
  const Backward b = differentiate(g, kBlockWeights, Recompute::blocks, m.blocks);
  // Block 0's result is read by block 1, block 1's by the loss: those are the checkpoints.
  // Inside the blocks nothing is saved: both blocks are recomputed from their inputs.
  EXPECT_EQ(saved_storage(b, g), (std::vector<int>{storage(g, m.outputs[0]), storage(g, m.outputs[1])}));
  const BackwardCost c = backward_cost(b, g, kBlockWeights);
  EXPECT_EQ(c.saved_activations, 2 * B * D * 4);
  // Each block's first matmul is recomputed (its VJPs read h and gelu(h)); the second one's
  // result y is read by no VJP (the add passes its gradient through), so it is not.
  EXPECT_EQ(c.recompute.matmul_flops, 2 * (2 * B * D * F));
  // Without blocks the policy is auto: no contraction is recomputed.
  const Backward plain = differentiate(g, kBlockWeights, Recompute::blocks, {});
  EXPECT_EQ(backward_cost(plain, g, kBlockWeights).recompute.matmul_flops, 0);
}

TEST(RecomputePlan, BlocksLowerThePeakBelowAuto) {
  Blocks m;
  const Graph& g = m.b.graph();
  const Backward blocks = differentiate(g, kBlockWeights, Recompute::blocks, m.blocks);
  const Backward automatic = differentiate(g, kBlockWeights, Recompute::automatic, m.blocks);
  const Backward none = differentiate(g, kBlockWeights, Recompute::none, m.blocks);
  const int64_t p_blocks = step_memory(g, blocks).peak, p_auto = step_memory(g, automatic).peak,
                p_none = step_memory(g, none).peak;
  EXPECT_LT(p_blocks, p_auto);
  EXPECT_LE(p_auto, p_none);
  // A rebuilt value sits just before its first reader: block 1's recomputation comes before
  // block 0's (the backward walks the blocks in reverse), so only one block's internals live
  // at a time. Block 1's rebuilt matmul precedes block 0's.
  std::vector<int> rebuilt_contracts;
  for (size_t j = 0; j < blocks.graph.nodes.size(); ++j)
    if (blocks.forward_of[j] >= 0 && blocks.graph.nodes[j].op == GraphOp::contract)
      rebuilt_contracts.push_back(blocks.forward_of[j]);
  ASSERT_EQ(rebuilt_contracts.size(), 2u);
  EXPECT_EQ(m.blocks[rebuilt_contracts[0]], 1);
  EXPECT_EQ(m.blocks[rebuilt_contracts[1]], 0);
}

TEST(RecomputePlan, EveryPolicyCostsTheSameGradientWork) {
  Blocks m;
  const Graph& g = m.b.graph();
  const auto vjp = [&](Recompute p) {
    const BackwardCost c = backward_cost(differentiate(g, kBlockWeights, p, m.blocks), g, kBlockWeights);
    return std::pair(c.input_grad.matmul_flops, c.weight_grad.matmul_flops);
  };
  const auto reference = vjp(Recompute::full);
  for (Recompute p : {Recompute::none, Recompute::automatic, Recompute::blocks})
    EXPECT_EQ(vjp(p), reference) << recompute_name(p);
}

// The liveness of the step as it runs (fused_step_memory): the forward fused with the saved
// values as extra outputs, then the fused backward, as the tape runs them.
TEST(RecomputePlan, FusedLivenessOfTheStepAsItRuns) {
  Mlp m;
  const Graph& g = m.b.graph();
  const int64_t gradients = (D * F + F * D) * 4;  // w1.grad and w2.grad
  for (Recompute policy : {Recompute::none, Recompute::automatic, Recompute::full}) {
    CompiledGraph c = compile_graph(g, {.differentiate = kWeights, .recompute = policy});
    const Backward& b = *c.backward;
    Graph with_saved = g;
    with_saved.outputs.insert(with_saved.outputs.end(), b.saved.begin(), b.saved.end());
    const Graph forward = compile_graph(std::move(with_saved), {}).fused;
    const StepMemory s = fused_step_memory(forward, 1, c.fused, b.saved_base);
    const BackwardCost bc = backward_cost(b, g, kWeights);
    // When the forward ends: the saved values and the loss.
    EXPECT_EQ(s.at_boundary, bc.saved_activations + 4) << recompute_name(policy);
    EXPECT_GE(s.peak, s.at_boundary);
    // Not bounded by the node-by-node step: a kernel with several outputs allocates them
    // together, and its place in the order is its first member's (under auto here the fused
    // step holds one B·F tensor more). What the executor measures is this (cli.ein_script).
    // The gradients count from when they are made to the end of the step.
    EXPECT_GE(s.peak_with_gradients, s.peak);
    EXPECT_LE(s.peak_with_gradients, s.peak + gradients);
    EXPECT_GE(s.peak_with_gradients, gradients);
  }
}

// A gradient freed early (a rank's ZeRO 2 drop, `freed_after`) stops counting after that
// node. In this MLP the peak with gradients is where the first gradient is made (the
// activations' peak plus that one gradient), so freeing each gradient right after the node
// that finishes it cannot lower it; it can never raise it, and -1 keeps the default. (The
// wide GPT in cli.ein_train_distributed is where the drop lowers the peak, measured.)
TEST(RecomputePlan, GradientsFreedEarlyNeverRaiseThePeakWithGradients) {
  Mlp m;
  const Graph& g = m.b.graph();
  CompiledGraph c = compile_graph(g, {.differentiate = kWeights, .recompute = Recompute::none});
  const Backward& b = *c.backward;
  Graph with_saved = g;
  with_saved.outputs.insert(with_saved.outputs.end(), b.saved.begin(), b.saved.end());
  const Graph forward = compile_graph(std::move(with_saved), {}).fused;
  const StepMemory kept = fused_step_memory(forward, 1, c.fused, b.saved_base);
  const std::vector<int> never(c.fused.outputs.size(), -1);
  EXPECT_EQ(fused_step_memory(forward, 1, c.fused, b.saved_base, never).peak_with_gradients,
            kept.peak_with_gradients);
  const std::vector<int> at_once = outputs_final_after(c.fused);
  ASSERT_EQ(at_once.size(), c.fused.outputs.size());
  for (int after : at_once)
    EXPECT_GE(after, 0);
  const StepMemory dropped = fused_step_memory(forward, 1, c.fused, b.saved_base, at_once);
  EXPECT_EQ(dropped.peak, kept.peak);  // activations are not affected
  EXPECT_EQ(kept.peak_with_gradients, kept.peak + D * F * 4);  // the first gradient's birth
  EXPECT_EQ(dropped.peak_with_gradients, kept.peak_with_gradients);
}

// --activation-budget: auto saves h (B·F) and y (B·D). Rebuilding h costs x·w1 (2·B·D·F
// FLOPs for B·F·4 bytes), y costs gelu(h)·w2 (the same FLOPs for B·D·4 bytes): h goes first,
// and then the rest (y) fits half of auto's bytes.
TEST(RecomputePlan, ABudgetRecomputesTheFewestFlopsPerByteFirst) {
  Mlp m;
  const Graph& g = m.b.graph();
  const Backward automatic = differentiate(g, kWeights, Recompute::automatic);
  const int64_t auto_saved = backward_cost(automatic, g, kWeights).saved_activations;
  const Backward half = differentiate(g, kWeights, Recompute::automatic, {}, true, 0.5);
  EXPECT_EQ(saved_storage(half, g), (std::vector<int>{storage(g, m.y)}));
  const BackwardCost c = backward_cost(half, g, kWeights);
  EXPECT_LE(c.saved_activations, auto_saved / 2);
  EXPECT_EQ(c.recompute.matmul_flops, 2 * B * D * F);  // x·w1 once more
  // A budget of 1 is auto.
  EXPECT_EQ(saved_storage(differentiate(g, kWeights, Recompute::automatic, {}, true, 1), g),
            saved_storage(automatic, g));
  // Only auto has a budget.
  const Backward none = differentiate(g, kWeights, Recompute::none, {}, true, 0.5);
  EXPECT_EQ(saved_storage(none, g), saved_storage(differentiate(g, kWeights, Recompute::none), g));
}

// In bf16 auto rebuilds nothing (AutoRebuildsNothingFromA16BitSavedValue); a budget's
// contractions may read 16-bit values: h from x and w1, then y from the saved g = gelu(h).
TEST(RecomputePlan, ABudgetRebuildsContractionsOf16BitValues) {
  Mlp m(DType::bf16);
  const Graph& g = m.b.graph();
  const Backward half = differentiate(g, kWeights, Recompute::automatic, {}, true, 0.5);
  EXPECT_EQ(saved_storage(half, g), (std::vector<int>{storage(g, m.g)}));
  const BackwardCost c = backward_cost(half, g, kWeights);
  EXPECT_EQ(c.saved_activations, B * F * 2);
  EXPECT_EQ(c.recompute.matmul_flops, 2 * (2 * B * D * F));
}

// A value a contraction rebuilds is no operand of another rebuild: rebuilding block 1's input
// x_0 from h_0, itself rebuilt from the graph's input, would hold it from block 1's backward
// to block 0's (at a GPT's scale, the residual stream rebuilt from the first block held the
// whole stream: a liveness peak of 508 MB instead of 156 MB). With no budget left, each block's
// first matmul is rebuilt from a saved value, and the block outputs stay saved.
TEST(RecomputePlan, ABudgetRebuildsOneContractionDeep) {
  Blocks m;
  const Graph& g = m.b.graph();
  const Backward b = differentiate(g, kBlockWeights, Recompute::automatic, m.blocks, true, 0);
  EXPECT_EQ(saved_storage(b, g),
            (std::vector<int>{storage(g, m.outputs[0]), storage(g, m.outputs[1])}));
  const BackwardCost c = backward_cost(b, g, kBlockWeights);
  EXPECT_EQ(c.recompute.matmul_flops, 2 * (2 * B * D * F));
  for (size_t j = 0; j < b.graph.nodes.size(); ++j) {
    if (b.forward_of[j] < 0 || b.graph.nodes[j].op != GraphOp::contract) continue;
    for (int in : b.graph.nodes[j].inputs) {
      int x = in;  // through the maps and views rebuilt for it
      while (b.forward_of[x] >= 0 && b.graph.nodes[x].op != GraphOp::input &&
             b.graph.nodes[x].op != GraphOp::contract && !b.graph.nodes[x].inputs.empty())
        x = b.graph.nodes[x].inputs[0];
      EXPECT_NE(b.graph.nodes[x].op, GraphOp::contract) << "rebuilt contraction " << j;
    }
  }
  // The same gradient work as every other plan.
  EXPECT_EQ(c.weight_grad.matmul_flops,
            backward_cost(differentiate(g, kBlockWeights, Recompute::full), g, kBlockWeights)
                .weight_grad.matmul_flops);
}

// A reshape that no strides make a view of its input copies when the executor runs it
// (exec/execute.cpp's run_reshape): the liveness counts its bytes. Merging a permuted
// value's dims (h (b e) of b h e) copies; merging contiguous ones (b (h e)) is a view.
TEST(RecomputePlan, FusedLivenessCountsTheReshapesThatCopy) {
  constexpr int64_t H = 4, E = 8;
  for (const bool permuted : {true, false}) {
    testing::GraphBuilder b;
    const int x = b.input({B, H, E}), w = b.input({B * E, F}), v = b.input({H * E, F});
    const int sq = b.map({x}, {{0, 1, 2}}, {B, H, E},
                         [](Kernel& k, auto& in) { return k.apply(ScalarOp::square, in[0]); });
    const int y = permuted ? b.einsum("h n, n f -> h f",
                                      {b.pattern("b h e -> h (b e)", PatternOp::rearrange, {sq}), w})
                           : b.einsum("b n, n f -> b f",
                                      {b.pattern("b h e -> b (h e)", PatternOp::rearrange, {sq}), v});
    b.output(b.reduce("r f ->", Reduction::mean, y));
    const Graph forward = fuse(b.graph());
    int64_t reshaped = -1;
    const StepMemory s = fused_step_memory(forward, 1, Graph{}, 0);
    for (size_t i = 0; i < forward.nodes.size(); ++i)  // the rearrange's (not the loss's)
      if (forward.nodes[i].op == GraphOp::reshape && forward.nodes[i].shape.size() == 2)
        reshaped = s.forward_bytes[i];
    EXPECT_EQ(reshaped, permuted ? B * H * E * 4 : 0) << (permuted ? "h (b e)" : "b (h e)");
  }
}

TEST(RecomputePlan, NamesRoundTrip) {
  for (Recompute p : {Recompute::none, Recompute::automatic, Recompute::blocks, Recompute::full})
    EXPECT_EQ(parse_recompute(recompute_name(p)), p);
  EXPECT_EQ(parse_recompute("selective"), std::nullopt);
}

}  // namespace
}  // namespace ein
