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
#include "compiler/graph/graph_builder.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/graph/stdlib_graphs.h"
#include <ein/pattern_parser.h>
#include "api/ops/ops_test_support.h"

namespace ein {
namespace {

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
  GraphBuilder g("mlp");
  const int x = g.input({b, d}, dtype), w1 = g.input({d, h}, dtype);
  const int b1 = g.input({h}, dtype), w2 = g.input({h, o}, dtype);
  const int y = g.input({b, o}, dtype);
  const int z =
      g.inline_graph(einsum_graph("b d, d h -> b h", {{b, d}, {d, h}}, dtype), {x, w1})[0];
  auto body = std::make_shared<Kernel>();
  body->name = "bias_gelu";
  body->body = body->result =
      body->apply(ScalarOp::gelu, body->apply(ScalarOp::add, body->load(0), body->load(1)));
  const int a = g.map({z, b1}, {{0, 1}, {1}}, {b, h}, dtype, body);
  const int p =
      g.inline_graph(einsum_graph("b h, h o -> b o", {{b, h}, {h, o}}, dtype), {a, w2})[0];
  return g.finish(g.inline_graph(mse_loss_graph({b, o}, dtype), {p, y}));
}

/// One step: the backward of `forward` for w1, b1, w2 and an AdamW update of each. Inputs:
/// the forward's, the loss cotangent, then per parameter exp_avg and exp_avg_sq, then the six
/// AdamW scalars. Outputs: per parameter the new param, exp_avg, exp_avg_sq.
Graph training_step(const Graph& forward, DType dtype) {
  const Backward bw = differentiate(forward, {false, true, true, true, false});
  Graph start = bw.graph;
  start.origin = "mlp training step";
  GraphBuilder g(std::move(start));  // new inputs after the 5 forward inputs and 1 cotangent
  std::vector<int> params;
  for (int p : bw.wrt)
    for (int i = 0; i < static_cast<int>(bw.graph.nodes.size()); ++i)
      if (g.node(i).op == GraphOp::input && std::get<InputAttr>(g.node(i).attr).index == p)
        params.push_back(i);
  std::vector<std::pair<int, int>> moments;
  for (int p : params) {
    const int m = g.input(g.node(p).shape, dtype);
    const int v = g.input(g.node(p).shape, dtype);
    moments.push_back({m, v});
  }
  std::vector<int> scalars;
  for (int k = 0; k < 6; ++k)
    scalars.push_back(g.input({}, dtype));
  std::vector<int> outputs;
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<int> args{params[k], bw.graph.outputs[k], moments[k].first, moments[k].second};
    args.insert(args.end(), scalars.begin(), scalars.end());
    const std::vector<int> out = g.inline_graph(adamw_graph(g.node(params[k]).shape, dtype), args);
    outputs.insert(outputs.end(), out.begin(), out.end());
  }
  return g.finish(outputs);
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

// A weight read as three column slices (a fused q|k|v projection): p = q·k + v with q, k, v
// = x·w[:, 0:h], x·w[:, h:2h], x·w[:, 2h:3h], MSE loss. The slices' gradients are put side by
// side in one concat (no zero padding, no sums of padded copies), and the gradient of w
// equals xᵀ·[dq | dk | dv] computed here in double.
TEST(FuseTrainingStep, AWeightReadAsSlicesGetsOneConcatOfTheirGradients) {
  const int64_t b = 5, d = 4, h = 3;
  GraphBuilder g("qkv");
  const int x = g.input({b, d}, DType::f64), w = g.input({d, 3 * h}, DType::f64);
  const int y = g.input({b, h}, DType::f64);
  std::vector<int> proj;
  for (int64_t part = 0; part < 3; ++part)
    proj.push_back(g.inline_graph(einsum_graph("b d, d h -> b h", {{b, d}, {d, h}}, DType::f64),
                                  {x, g.slice(w, 1, part * h, (part + 1) * h)})[0]);
  auto body = std::make_shared<Kernel>();
  body->name = "qk_plus_v";
  body->body = body->result = body->apply(
      ScalarOp::add, body->apply(ScalarOp::mul, body->load(0), body->load(1)), body->load(2));
  const int p = g.map(proj, {{0, 1}, {0, 1}, {0, 1}}, {b, h}, DType::f64, body);
  const Graph forward = g.finish(g.inline_graph(mse_loss_graph({b, h}, DType::f64), {p, y}));
  const Backward bw = differentiate(forward, {false, true, false});
  int concats = 0, sums = 0;
  for (const GraphNode& n : bw.graph.nodes) {
    concats += n.op == GraphOp::concat;
    sums += n.op == GraphOp::map && std::get<MapAttr>(n.attr).body->name == "accumulate";
  }
  EXPECT_EQ(concats, 1) << dump(bw.graph);
  EXPECT_EQ(sums, 0) << dump(bw.graph);

  const Tensor xs = randn({b, d}, DType::f64, cpu(), 61), ws = randn({d, 3 * h}, DType::f64, cpu(), 62),
               ys = randn({b, h}, DType::f64, cpu(), 63);
  const std::vector<Tensor> got =
      execute(bw.graph, {xs, ws, ys, from_data<double>({1.0}, {})});
  ASSERT_EQ(got.size(), 1u);
  const std::vector<double> xv = xs.to_vector<double>(), wv = ws.to_vector<double>(),
                            yv = ys.to_vector<double>();
  std::vector<double> want(d * 3 * h, 0.0);
  for (int64_t r = 0; r < b; ++r)
    for (int64_t c = 0; c < h; ++c) {
      double q = 0, k = 0, v = 0;
      for (int64_t i = 0; i < d; ++i) {
        q += xv[r * d + i] * wv[i * 3 * h + c];
        k += xv[r * d + i] * wv[i * 3 * h + h + c];
        v += xv[r * d + i] * wv[i * 3 * h + 2 * h + c];
      }
      const double dp = 2 * (q * k + v - yv[r * h + c]) / static_cast<double>(b * h);
      for (int64_t i = 0; i < d; ++i) {
        want[i * 3 * h + c] += xv[r * d + i] * dp * k;
        want[i * 3 * h + h + c] += xv[r * d + i] * dp * q;
        want[i * 3 * h + 2 * h + c] += xv[r * d + i] * dp;
      }
    }
  testing::expect_close(got[0], {{d, 3 * h}, want}, testing::tolerance_for(DType::f64, b * d),
                        "the gradient of w");
}

}  // namespace
}  // namespace ein
