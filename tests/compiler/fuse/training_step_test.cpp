// A whole training step as one graph — forward (Linear → GELU → Linear, MSE loss), its
// backward from differentiate(), and an AdamW update per parameter — fused and run: the
// contractions stay BLAS calls, everything else fuses, and the new parameters and moments
// equal the unfused graph's (run in float64) on random inputs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/fusion_report.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/graph/stdlib_graphs.h"
#include <ein/pattern_parser.h>
#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

int add_input(Graph& g, Shape shape, DType dtype, int& next) {
  GraphNode n;
  n.op = GraphOp::input;
  n.shape = std::move(shape);
  n.dtype = dtype;
  n.attr = InputAttr{next++};
  return g.add(std::move(n));
}

/// Appends `f` to `g` with f's input i fed by g's node args[i]; returns f's outputs in g.
std::vector<int> append(Graph& g, const Graph& f, const std::vector<int>& args) {
  std::vector<int> id(f.nodes.size());
  for (size_t i = 0; i < f.nodes.size(); ++i) {
    GraphNode n = f.nodes[i];
    if (n.op == GraphOp::input) {
      id[i] = args.at(std::get<InputAttr>(n.attr).index);
      continue;
    }
    for (int& j : n.inputs)
      j = id[j];
    id[i] = g.add(std::move(n));
  }
  std::vector<int> out;
  for (int o : f.outputs)
    out.push_back(id[o]);
  return out;
}

Graph einsum_graph(const std::string& pattern, const std::vector<Shape>& shapes, DType dtype) {
  ResolveRequest req;
  req.op = PatternOp::einsum;
  req.shapes = shapes;
  req.dtype = dtype;
  std::vector<TensorType> types;
  for (const Shape& s : shapes)
    types.push_back({s, dtype});
  return lower_pattern(resolve_pattern(parse_pattern(pattern), req), types, {}, 0, pattern);
}

/// Forward: inputs x (b d), w1 (d h), b1 (h), w2 (h o), y (b o); output the MSE loss.
Graph mlp(int64_t b, int64_t d, int64_t h, int64_t o, DType dtype) {
  Graph g;
  g.origin = "mlp";
  int next = 0;
  const int x = add_input(g, {b, d}, dtype, next), w1 = add_input(g, {d, h}, dtype, next);
  const int b1 = add_input(g, {h}, dtype, next), w2 = add_input(g, {h, o}, dtype, next);
  const int y = add_input(g, {b, o}, dtype, next);
  const int z = append(g, einsum_graph("b d, d h -> b h", {{b, d}, {d, h}}, dtype), {x, w1})[0];
  auto body = std::make_shared<Kernel>();
  body->name = "bias_gelu";
  body->body = body->result =
      body->apply(ScalarOp::gelu, body->apply(ScalarOp::add, body->load(0), body->load(1)));
  GraphNode act;
  act.op = GraphOp::map;
  act.inputs = {z, b1};
  act.shape = {b, h};
  act.dtype = dtype;
  act.attr = MapAttr{body, {{0, 1}, {1}}};
  const int a = g.add(std::move(act));
  const int p = append(g, einsum_graph("b h, h o -> b o", {{b, h}, {h, o}}, dtype), {a, w2})[0];
  g.outputs = append(g, mse_loss_graph({b, o}, dtype), {p, y});
  verify(g);
  return g;
}

/// One step: the backward of `forward` for w1, b1, w2 and an AdamW update of each. Inputs:
/// the forward's, the loss cotangent, then per parameter exp_avg and exp_avg_sq, then the six
/// AdamW scalars. Outputs: per parameter the new param, exp_avg, exp_avg_sq.
Graph training_step(const Graph& forward, DType dtype) {
  const Backward bw = differentiate(forward, {false, true, true, true, false});
  Graph g = bw.graph;
  g.origin = "mlp training step";
  int next = 6;  // 5 forward inputs, 1 cotangent
  std::vector<int> params;
  for (int p : bw.wrt)
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].op == GraphOp::input && std::get<InputAttr>(g.nodes[i].attr).index == p)
        params.push_back(static_cast<int>(i));
  std::vector<std::pair<int, int>> moments;
  for (int p : params) {
    const int m = add_input(g, g.nodes[p].shape, dtype, next);
    const int v = add_input(g, g.nodes[p].shape, dtype, next);
    moments.push_back({m, v});
  }
  std::vector<int> scalars;
  for (int k = 0; k < 6; ++k)
    scalars.push_back(add_input(g, {}, dtype, next));
  std::vector<int> outputs;
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<int> args{params[k], bw.graph.outputs[k], moments[k].first, moments[k].second};
    args.insert(args.end(), scalars.begin(), scalars.end());
    const std::vector<int> out = append(g, adamw_graph(g.nodes[params[k]].shape, dtype), args);
    outputs.insert(outputs.end(), out.begin(), out.end());
  }
  g.outputs = outputs;
  verify(g);
  return g;
}

TEST(FuseTrainingStep, MlpWithAdamWMatchesUnfused) {
  const Graph step = training_step(mlp(16, 12, 20, 3, DType::f32), DType::f32);
  const Graph step64 = training_step(mlp(16, 12, 20, 3, DType::f64), DType::f64);
  const Graph fused = fuse(step);
  int contracts = 0, unfused_compute = 0;
  for (const GraphNode& n : fused.nodes) {
    contracts += n.op == GraphOp::contract ? 1 : 0;
    unfused_compute += n.op == GraphOp::map || n.op == GraphOp::reduce ? 1 : 0;
  }
  EXPECT_EQ(unfused_compute, 0) << fusion_report(step, fused);
  EXPECT_GE(contracts, 5);  // two forward products, three backward ones (x needs no gradient)
  // Far fewer kernels than the unfused graph's maps and reductions: five (bias + GELU forward,
  // the loss, its backward into the bias and GELU gradients, and the AdamW updates' kernels).
  int before = 0;
  for (const GraphNode& n : step.nodes)
    before += n.op == GraphOp::map || n.op == GraphOp::reduce;
  EXPECT_LE(count_kernels(fused), 5) << fusion_report(step, fused);
  EXPECT_LT(2 * count_kernels(fused), before) << fusion_report(step, fused);
  std::printf("mlp training step: %d maps and reductions -> %d kernels and %d BLAS calls\n", before,
              count_kernels(fused), contracts);

  const double scalars[] = {1e-2, 0.9, 0.999, 1e-8, 0.01, 4};  // lr, β1, β2, eps, wd, step
  uint64_t seed = 40;
  size_t count = 0;
  for (const GraphNode& n : step.nodes)
    count += n.op == GraphOp::input ? 1 : 0;
  // Inputs in InputAttr order.
  std::vector<Tensor> inputs(count);
  int scalar = 0;
  for (const GraphNode& n : step.nodes) {
    if (n.op != GraphOp::input) continue;
    const int index = std::get<InputAttr>(n.attr).index;
    if (n.shape.empty() && index >= 6)
      inputs[index] = from_data<double>({scalars[scalar++]}, {}).to(DType::f32);
    else if (index >= 6 && (index - 6) % 2 == 1)  // exp_avg_sq >= 0
      inputs[index] = rand(n.shape, DType::f64, cpu(), ++seed).to(DType::f32);
    else
      inputs[index] = testing::random_tensor(n.shape, DType::f32, ++seed, testing::Layout::strided);
  }
  std::vector<Tensor> inputs64;
  for (const Tensor& x : inputs)
    inputs64.push_back(x.to(DType::f64));
  const std::vector<Tensor> want = execute(step64, inputs64), got = execute(fused, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    testing::expect_close(got[i], testing::to_array(want[i]),
                          testing::tolerance_for(DType::f32, 16 * 20), fmt::format("output {}", i));
}

}  // namespace
}  // namespace ein
