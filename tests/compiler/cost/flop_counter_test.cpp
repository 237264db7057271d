// ein::FlopCounter on work that actually runs: the counts agree with the static cost model
// and with the op_* rows of accounting_cases.tsv (mm, op_mixed_sum); launches, nesting,
// phases, per-origin breakdown, thread isolation, MFU against the hardware table.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include <ein/ein.h>
#include <ein/flop_counter.h>
#include <ein/nn.h>

#include "compiler/cost/cost_model.h"
#include "exec/run_kernel.h"
#include "exec/execute.h"
#include "conformance/tsv.h"
#include "compiler/cost/graph_builder.h"
#include "runtime/blas/contract.h"
#include "runtime/counters.h"

namespace ein {
namespace {

using testing::GraphBuilder;

/// An accounting_cases.tsv row's expected value (first number of the cell).
double tsv_number(const std::string& name) {
  for (const auto& row : testing::read_tsv(testing::conformance_file("accounting_cases.tsv")))
    if (row["case"] == name) return std::strtod(row["expected value"].c_str(), nullptr);
  ADD_FAILURE() << "no row " << name;
  return -1;
}

Tensor rand(Shape s, uint64_t seed) {
  return randn(std::move(s), DType::f32, cpu(), seed);
}

TEST(FlopCounter, NothingCountsWithoutAScope) {
  EXPECT_FALSE(detail::counting());
  {
    FlopCounter c;
    EXPECT_TRUE(detail::counting());
  }
  EXPECT_FALSE(detail::counting());
}

TEST(FlopCounter, MmCountsTheRowAndOneBlasLaunch) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2);
  FlopCounter c;
  einsum("m k, k n -> m n", a, b);
  EXPECT_EQ(c.totals().matmul_flops, static_cast<int64_t>(tsv_number("op_mm_flops")));
  EXPECT_EQ(c.totals().flops, 240);
  EXPECT_EQ(c.totals().bytes_read, (20 + 30) * 4);
  EXPECT_EQ(c.totals().bytes_written, 24 * 4);
  EXPECT_EQ(c.totals().kernels, 1);  // contiguous operands fold into one sgemm: no copies
  EXPECT_EQ(c.phase(CostPhase::forward), c.totals());
}

// op_mixed_sum with ein's ops: addmm and Linear are an einsum and a bias map each.
TEST(FlopCounter, MixedSumAgreesWithTorchsMatmulCount) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2), bias6 = rand({6}, 3);
  const Tensor m1 = rand({5, 6}, 4), m2 = rand({6, 7}, 5), e1 = rand({6, 7}, 6),
               e2 = rand({7, 8}, 7), x = rand({8, 9}, 8), w = rand({10, 9}, 9),
               bias10 = rand({10}, 10);
  FlopCounter c;
  einsum("m k, k n -> m n", a, b);                                          // mm
  map("y[m n], b[n] -> y + b", {einsum("m k, k n -> m n", a, b), bias6});   // addmm
  einsum("m k, k n -> m n", m1, m2);                                        // matmul
  einsum("a b, b c -> a c", e1, e2);                                        // einsum
  map("y[b o], c[o] -> y + c", {einsum("b i, o i -> b o", x, w), bias10});  // Linear
  EXPECT_EQ(c.totals().matmul_flops, static_cast<int64_t>(tsv_number("op_mixed_sum")));
  EXPECT_EQ(c.totals().flops, 3012 + 4 * 6 + 8 * 10);  // plus the bias adds
  // By origin: the pattern or expression text, like torch's get_flop_counts per module.
  const auto& by = c.by_origin();
  ASSERT_EQ(by.count("m k, k n -> m n"), 1u);
  EXPECT_EQ(by.at("m k, k n -> m n").matmul_flops, 240 + 240 + 420);
  EXPECT_EQ(by.at("a b, b c -> a c").matmul_flops, 672);
  EXPECT_EQ(by.at("b i, o i -> b o").matmul_flops, 1440);
  EXPECT_EQ(by.at("y[b o], c[o] -> y + c").flops, 80);
  EXPECT_EQ(by.at("y[b o], c[o] -> y + c").kernels, 1);
}

/// The counter's totals for running `run`, and the static cost of the same graph.
void expect_runtime_matches_static(const std::function<void()>& run, const Graph& g) {
  FlopCounter c;
  run();
  const NodeCost s = cost(g).total;
  EXPECT_EQ(c.totals().flops, s.flops) << format_cost(g, cost(g));
  EXPECT_EQ(c.totals().matmul_flops, s.matmul_flops);
  EXPECT_EQ(c.totals().bytes_read, s.bytes_read) << format_cost(g, cost(g));
  EXPECT_EQ(c.totals().bytes_written, s.bytes_written) << format_cost(g, cost(g));
}

TEST(FlopCounter, RuntimeAgreesWithTheStaticModel) {
  const Tensor x = rand({6, 10}, 1), q = rand({2, 3, 4, 8}, 2), k = rand({2, 3, 5, 8}, 3);
  {
    GraphBuilder b;
    b.output(b.reduce("a b -> a", Reduction::logsumexp, b.input({6, 10})));
    expect_runtime_matches_static([&] { reduce(x, "a b -> a", "logsumexp"); }, b.graph());
  }
  {
    GraphBuilder b;
    b.output(
        b.einsum("b h q d, b h k d -> b h q k", {b.input({2, 3, 4, 8}), b.input({2, 3, 5, 8})}));
    expect_runtime_matches_static([&] { einsum("b h q d, b h k d -> b h q k", q, k); }, b.graph());
  }
  {  // a reshape of a transposed view copies, at run time as in the model
    GraphBuilder b;
    b.output(b.pattern("a b -> (b a)", PatternOp::rearrange, {b.input({6, 10})}));
    expect_runtime_matches_static([&] { rearrange(x, "a b -> (b a)"); }, b.graph());
  }
  {  // and a view stays free
    GraphBuilder b;
    b.output(b.pattern("a (b c) -> c a b", PatternOp::rearrange, {b.input({6, 10})}, {{"b", 2}}));
    expect_runtime_matches_static([&] { rearrange(x, "a (b c) -> c a b", {{"b", 2}}); }, b.graph());
  }
}

TEST(FlopCounter, ScopesNestAndEveryLiveScopeCounts) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2);
  FlopCounter outer;
  einsum("m k, k n -> m n", a, b);
  {
    FlopCounter inner;
    einsum("m k, k n -> m n", a, b);
    EXPECT_EQ(inner.totals().matmul_flops, 240);
  }
  EXPECT_EQ(outer.totals().matmul_flops, 480);
  EXPECT_EQ(outer.totals().kernels, 2);
  outer.reset();
  EXPECT_EQ(outer.totals(), CostTotals{});
  EXPECT_TRUE(outer.by_origin().empty());
}

TEST(FlopCounter, OtherThreadsAreNotCounted) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2);
  FlopCounter c;
  std::thread([&] { einsum("m k, k n -> m n", a, b); }).join();
  EXPECT_EQ(c.totals(), CostTotals{});
}

TEST(FlopCounter, ExecuteChargesEachNodeToItsPhase) {
  GraphBuilder b("two matmuls");
  const int x = b.input({4, 5}), w = b.input({5, 6}), v = b.input({6, 3});
  const int h = b.einsum("m k, k n -> m n", {x, w});
  b.output(b.einsum("m k, k n -> m n", {h, v}));
  // The nodes of the second einsum (after h) are "weight_grad", the rest forward.
  std::vector<CostPhase> phases(b.graph().nodes.size(), CostPhase::forward);
  for (size_t i = h + 1; i < phases.size(); ++i)
    phases[i] = CostPhase::weight_grad;
  FlopCounter c;
  execute(b.graph(), {rand({4, 5}, 1), rand({5, 6}, 2), rand({6, 3}, 3)}, phases);
  EXPECT_EQ(c.phase(CostPhase::forward).matmul_flops, 2 * 4 * 5 * 6);
  EXPECT_EQ(c.phase(CostPhase::weight_grad).matmul_flops, 2 * 4 * 6 * 3);
  EXPECT_EQ(c.phase(CostPhase::weight_grad).kernels, 1);
  EXPECT_EQ(c.by_origin().at("two matmuls").matmul_flops, 240 + 144);
}

// A kernel run directly (as nn functions and optimizers do) is charged its own cost: its
// Kernel IR's FLOPs and its buffers' bytes, under the kernel's name.
TEST(FlopCounter, KernelsRunOutsideGraphsCountTheirOwnCost) {
  Kernel k;  // softmax over the last dim of x (4, 10)
  k.name = "test_softmax";
  k.domain = {4, 10};
  k.reduced = 1;
  const int xb = k.add_buffer(DType::f32, {10, 1});
  const int yb = k.add_output(DType::f32, {10, 1});
  const int x = k.load(xb);
  const int m = k.reduce(Combine::max, x);
  const int e = k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, x, m));
  k.store(yb, k.apply(ScalarOp::div, e, k.reduce(Combine::sum, e)));
  const Tensor in = rand({4, 10}, 1), out = empty({4, 10}, DType::f32, cpu());
  FlopCounter c;
  run_kernel(k, std::vector<Tensor>{in, out});
  // Two stages × 40 combines; sub, exp, div at 40 points each.
  const CostTotals want{2 * 40 + 3 * 40, 0, 40 * 4, 40 * 4, 1};
  EXPECT_EQ(c.totals(), want);
  EXPECT_EQ(c.by_origin().at("test_softmax"), want);
}

TEST(FlopCounter, FusedNnFunctionsAreCounted) {
  const Tensor x = rand({8, 32}, 1);
  FlopCounter c;
  nn::softmax(x);
  EXPECT_EQ(c.totals().kernels, 1);         // one fused kernel
  EXPECT_GE(c.totals().flops, 4 * 8 * 32);  // at least max, subtract, exp, sum per element
  EXPECT_EQ(c.totals().bytes_read, 8 * 32 * 4);
  EXPECT_EQ(c.totals().bytes_written, 8 * 32 * 4);
}

TEST(FlopCounter, DirectBlasCallsCountTheirMatmulFlops) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2);
  FlopCounter c;
  contract(a, {0, 1}, b, {1, 2}, {0, 2});
  EXPECT_EQ(c.by_origin().at("gemm"), (CostTotals{240, 240, 50 * 4, 24 * 4, 1}));
}

TEST(FlopCounter, WorkWithoutAPhaseTakesTheCurrentOne) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2);
  FlopCounter c;
  {
    const detail::CountingPhase backward(CostPhase::input_grad);
    einsum("m k, k n -> m n", a, b);
  }
  einsum("m k, k n -> m n", a, b);
  EXPECT_EQ(c.phase(CostPhase::input_grad).matmul_flops, 240);
  EXPECT_EQ(c.phase(CostPhase::forward).matmul_flops, 240);
}

// mfu_nanogpt_a100: 874944921600 FLOPs per sequence, 100 sequences in 0.755 s on an A100's
// bf16 peak (312e12) → 0.3714 (the row rounds to 4 digits).
TEST(FlopCounter, UtilizationReproducesNanoGptsMfu) {
  const double mfu = utilization(874944921600.0 * 100, 0.755, hardware("a100"), DType::bf16);
  EXPECT_NEAR(mfu, tsv_number("mfu_nanogpt_a100"), 0.5e-4);
  EXPECT_EQ(utilization(1e12, 1, hardware("a100"), DType::f8e4m3), 0);  // A100: no fp8
}

TEST(FlopCounter, MfuIsAchievedFlopsOverThePeak) {
  const Tensor a = rand({64, 64}, 1), b = rand({64, 64}, 2);
  FlopCounter c;
  einsum("m k, k n -> m n", a, b);
  const HardwareProfile& h100 = hardware("h100-sxm");
  const double before = c.seconds();
  const double mfu = c.mfu(h100, DType::bf16);
  const double after = c.seconds();
  const double flops = 2.0 * 64 * 64 * 64;
  EXPECT_LE(mfu, flops / before / 989.5e12);  // the clock only moves forward
  EXPECT_GE(mfu, flops / after / 989.5e12);
  EXPECT_GT(c.flops_per_second(), 0);
  EXPECT_EQ(math_mode_of(DType::f32), MathMode::fp32);
  EXPECT_EQ(math_mode_of(DType::bf16), MathMode::bf16);
}

TEST(FlopCounter, RecomputedFlopsCountForHfuNotMfu) {
  FlopCounter c;
  CostTotals work;
  work.flops = 300;
  c.add("f", CostPhase::forward, work);
  work.flops = 100;
  c.add("f", CostPhase::recompute, work);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the two reads below differ by ns
  const HardwareProfile& cpu = this_cpu();
  const double mfu = c.mfu(cpu, DType::f32), hfu = c.hfu(cpu, DType::f32);
  EXPECT_GT(mfu, 0);
  EXPECT_NEAR(hfu / mfu, 4.0 / 3.0, 1e-3);  // the two calls read the clock a moment apart
}

TEST(FlopCounter, ReportStatesTheConvention) {
  const Tensor a = rand({4, 5}, 1), b = rand({5, 6}, 2);
  FlopCounter c;
  einsum("m k, k n -> m n", a, b);
  const std::string r = c.report();
  EXPECT_EQ(r.rfind("FLOPs: 2 per multiply-add", 0), 0u) << r;
  EXPECT_NE(r.find("m k, k n -> m n"), std::string::npos) << r;
  EXPECT_NE(r.find("phase forward"), std::string::npos) << r;
}

}  // namespace
}  // namespace ein
