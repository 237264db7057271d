// The stage chain of compiler/pipeline.h: each entry runs the stages it is asked for and
// returns each one's output, EIN_DUMP prints exactly the stages it names (and nothing when
// unset), and emit_kernel gives each target's source from one prepared kernel.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "compiler/fuse/fuse.h"
#include "compiler/graph/stdlib_graphs.h"
#include "compiler/pipeline.h"
#include "exec/run_fused.h"

namespace ein {
namespace {

/// The one fused kernel of softmax over (4, 32), bound for contiguous inputs.
Kernel softmax_kernel() {
  const Graph fused = fuse(softmax_graph({4, 32}));
  for (const GraphNode& n : fused.nodes)
    if (n.op == GraphOp::fused) return bind_fused(std::get<FusedAttr>(n.attr), {{4, 32}}, {{32, 1}});
  ADD_FAILURE() << "softmax did not fuse";
  return {};
}

// First in this binary: EIN_DUMP is read once per process, at the first dump.
TEST(Pipeline, EinDumpPrintsTheNamedStagesOnly) {
  ::setenv("EIN_DUMP", "backward,fused", 1);
  ASSERT_TRUE(dump_enabled(Stage::fused));
  EXPECT_TRUE(dump_enabled(Stage::backward));
  EXPECT_FALSE(dump_enabled(Stage::ir));
  EXPECT_FALSE(dump_enabled(Stage::mlir));
  testing::internal::CaptureStderr();
  const CompiledGraph c = compile_graph(layer_norm_graph({8, 16}), {.differentiate = {true, true, true}});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("== ein backward: "), std::string::npos) << err;
  EXPECT_NE(err.find("== ein fused: "), std::string::npos) << err;
  EXPECT_EQ(err.find("== ein ir: "), std::string::npos) << err;
  EXPECT_EQ(err.find("== ein cost: "), std::string::npos) << err;
  // The dump of a stage is that stage's text: the fused graph as dump() prints it.
  EXPECT_NE(err.find(dump(c.fused)), std::string::npos);
}

TEST(Pipeline, StageNamesRoundTrip) {
  for (Stage s : {Stage::sema, Stage::ir, Stage::backward, Stage::cost, Stage::fused,
                  Stage::kernels, Stage::mlir, Stage::cuda})
    EXPECT_EQ(parse_stage(stage_name(s)), s);
  EXPECT_FALSE(parse_stage("parse").has_value());
}

TEST(Pipeline, ForwardOnlyFusesTheGraphAsGiven) {
  const Graph g = softmax_graph({4, 32});
  const CompiledGraph c = compile_graph(g, {});
  EXPECT_FALSE(c.backward.has_value());
  EXPECT_FALSE(c.cost.has_value());
  EXPECT_EQ(dump(c.graph), dump(g));
  EXPECT_EQ(dump(c.fused), dump(fuse(g)));
  EXPECT_EQ(c.fused_source.size(), c.fused.nodes.size());
}

TEST(Pipeline, DifferentiateThenCostWithoutFusing) {
  const Graph g = layer_norm_graph({8, 16});
  const CompiledGraph c = compile_graph(g, {.differentiate = {true, true, true}, .cost = true, .fuse = false});
  ASSERT_TRUE(c.backward.has_value());
  ASSERT_TRUE(c.cost.has_value());
  EXPECT_EQ(dump(c.graph), dump(c.backward->graph));  // the later stages took the backward graph
  EXPECT_EQ(c.cost->nodes.size(), c.graph.nodes.size());
  EXPECT_GT(c.cost->total.flops, 0);
  EXPECT_TRUE(c.fused.nodes.empty());
}

TEST(Pipeline, EmitKernelGivesEachTargetsSource) {
  const Kernel k = softmax_kernel();
  const std::string mlir = emit_kernel(k, Target::mlir);
  EXPECT_NE(mlir.find("func.func @ein_" + k.name), std::string::npos) << mlir;
  EXPECT_NE(emit_kernel(k, Target::mlir, "my_entry").find("func.func @my_entry"),
            std::string::npos);
  const std::string cuda = emit_kernel(k, Target::cuda);
  EXPECT_NE(cuda.find("__global__"), std::string::npos) << cuda;
}

}  // namespace
}  // namespace ein
