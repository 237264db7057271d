// split_scalar_prelude: an update-shaped graph (a 0-dim kernel of the step's scalars read by a
// kernel over the parameter) splits into that kernel and the rest, which together give the
// graph's values exactly; nothing splits where no kernel depends on the given inputs alone.
#include <gtest/gtest.h>

#include <vector>

#include "api/ops/ops_test_support.h"
#include "compiler/fuse/fuse.h"
#include "compiler/graph/graph_builder.h"
#include "compiler/graph/scalar_prelude.h"
#include "exec/execute.h"

namespace ein {
namespace {

/// Inputs p [6, 10], lr [] and t []: c = lr / (1 - 0.9^t) (0-dim), p' = p - c·p; returns p'
/// and c, fused (two kernels: the fusion pass does not widen c's kernel onto p's domain).
Graph update_like() {
  GraphBuilder g("update_like");
  const int p = g.input({6, 10}), lr = g.input({}), t = g.input({});
  const int c =
      g.map({lr, t}, {{}, {}}, {}, DType::f32, "bias_correction",
            [](Kernel& k, const std::vector<int>& in) {
              const int power = k.apply(ScalarOp::pow, k.constant(0.9), in[1]);
              return k.apply(ScalarOp::div, in[0], k.apply(ScalarOp::sub, k.constant(1), power));
            });
  const int step = g.map(
      {p, c}, {{0, 1}, {}}, {6, 10}, DType::f32, "step", [](Kernel& k, const std::vector<int>& in) {
        return k.apply(ScalarOp::sub, in[0], k.apply(ScalarOp::mul, in[1], in[0]));
      });
  return fuse(g.finish({step, c}));
}

int fused_nodes(const Graph& g) {
  int n = 0;
  for (const GraphNode& node : g.nodes)
    n += node.op == GraphOp::fused;
  return n;
}

TEST(ScalarPrelude, TheStepScalarsKernelSplitsOffAndTheValuesStayExact) {
  const Graph g = update_like();
  ASSERT_EQ(fused_nodes(g), 2) << dump(g);
  const std::optional<ScalarPrelude> split = split_scalar_prelude(g, {1, 2});
  ASSERT_TRUE(split.has_value()) << dump(g);
  EXPECT_EQ(fused_nodes(split->prelude), 1) << dump(split->prelude);
  EXPECT_EQ(fused_nodes(split->rest), 1) << dump(split->rest);
  ASSERT_EQ(split->prelude.outputs.size(), 1u) << "c, read by the step and returned";
  verify(split->prelude);
  verify(split->rest);
  for (const double t : {1.0, 2.0, 1000.0, 0.0}) {  // t = 0: c = lr / 0 = ±inf
    const std::vector<Tensor> inputs{
        testing::random_tensor({6, 10}, DType::f32, 7, testing::Layout::strided),
        testing::tensor_of({1e-3}, {}, DType::f32), testing::tensor_of({t}, {}, DType::f32)};
    const std::vector<Tensor> want = execute(g, inputs);
    std::vector<Tensor> rest_inputs = inputs;
    for (const Tensor& v : execute(split->prelude, inputs))
      rest_inputs.push_back(v);
    const std::vector<Tensor> got = execute(split->rest, rest_inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i].to_vector<double>(), want[i].to_vector<double>())
          << "t " << t << " output " << i;
  }
}

TEST(ScalarPrelude, NothingSplitsWhereNoKernelDependsOnTheGivenInputsAlone) {
  const Graph g = update_like();
  EXPECT_FALSE(split_scalar_prelude(g, {1}).has_value()) << "c reads t as well";
  EXPECT_FALSE(split_scalar_prelude(g, {0, 2}).has_value()) << "p is not a scalar";
  EXPECT_FALSE(split_scalar_prelude(g, {}).has_value());
}

}  // namespace
}  // namespace ein
