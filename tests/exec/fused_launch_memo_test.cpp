// A fused node's repeated launches reuse what its first launch with a layout of the inputs
// bound, keyed and prepared (run_fused.cpp's BoundFused, run_kernel.h's KernelMemo): each
// layout gets its own binding, the values stay right whichever comes back, and a kernel
// prepared for one CUDA execution is prepared again for the next one installed.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <ein/ops.h>
#include <ein/tensor.h>

#include "compiler/fuse/fuse.h"
#include "compiler/graph/graph_builder.h"
#include "exec/execute.h"
#include "support/fake_cuda.h"

namespace ein {
namespace {

/// x [4, 6] and y [4, 6] -> sum over the last dim of (2·x + y): one fused row kernel.
Graph row_kernel() {
  GraphBuilder g("memo");
  const int x = g.input({4, 6}), y = g.input({4, 6});
  const int m =
      g.map({x, y}, {{0, 1}, {0, 1}}, {4, 6}, DType::f32, "twice_plus",
            [](Kernel& k, const std::vector<int>& in) {
              return k.apply(ScalarOp::add, k.apply(ScalarOp::mul, k.constant(2), in[0]), in[1]);
            });
  return fuse(g.finish({g.reduce_dims(m, Reduction::sum, {1})}));
}

void expect_rows(const Tensor& got, const Tensor& x, const Tensor& y, const std::string& what) {
  const std::vector<double> xs = x.to_vector<double>(), ys = y.to_vector<double>();
  const std::vector<double> rows = got.to(cpu()).to_vector<double>();
  ASSERT_EQ(rows.size(), 4u) << what;
  for (size_t r = 0; r < 4; ++r) {
    double want = 0;
    for (size_t c = 0; c < 6; ++c)
      want += 2 * xs[r * 6 + c] + ys[r * 6 + c];
    EXPECT_NEAR(rows[r], want, 1e-5 * (1 + std::abs(want))) << what << " row " << r;
  }
}

/// x laid out four ways: contiguous, every other column of a wider tensor, transposed, and
/// broadcast along the rows: `view` of `base` (on the CPU, or a copy of it on a device).
struct Layout {
  std::string name;
  Tensor base;                         // on the CPU
  Tensor (*view)(const Tensor& base);  // base -> x [4, 6]
};

std::vector<Layout> layouts() {
  return {{"contiguous", randn({4, 6}, DType::f32, cpu(), 1), [](const Tensor& t) { return t; }},
          {"strided", randn({4, 12}, DType::f32, cpu(), 2),
           [](const Tensor& t) { return t.slice(1, 0, 12, 2); }},
          {"transposed", randn({6, 4}, DType::f32, cpu(), 3),
           [](const Tensor& t) {
             return t.permute({1, 0});
           }},
          {"broadcast", randn({1, 6}, DType::f32, cpu(), 4), [](const Tensor& t) {
             return t.expand({4, 6});
           }}};
}

TEST(FusedLaunchMemo, EachLayoutOfTheInputsRunsWithItsOwnBinding) {
  const Graph g = row_kernel();
  const Tensor y = randn({4, 6}, DType::f32, cpu(), 5);
  for (int round = 0; round < 2; ++round)  // the second round finds every layout bound
    for (const Layout& l : layouts()) {
      const Tensor x = l.view(l.base);
      expect_rows(execute(g, {x, y}).front(), x, y, l.name + " round " + std::to_string(round));
    }
}

TEST(FusedLaunchMemo, AKernelIsPreparedAgainForTheNextCudaExecution) {
  if (std::string why; !testing::FakeCudaDevice::available(&why)) GTEST_SKIP() << why;
  const Graph g = row_kernel();
  const Tensor y = randn({4, 6}, DType::f32, cpu(), 5);
  for (int device = 0; device < 2; ++device) {  // a fresh CudaExecution each time
    const testing::FakeCudaDevice fake;
    const Tensor y_there = y.to(cuda());
    const std::vector<Layout> ls = layouts();
    std::vector<Tensor> results;
    for (const Layout& l : ls)
      results.push_back(execute(g, {l.view(l.base.to(cuda())), y_there}).front());
    EXPECT_GE(fake.kernels_prepared(), 1) << "fake device " << device;
    EXPECT_EQ(fake.launches(), 4) << "fake device " << device;
    for (size_t i = 0; i < results.size(); ++i) {
      const Layout& l = ls[i];
      expect_rows(results[i], l.view(l.base), y,
                  l.name + " on fake device " + std::to_string(device));
    }
  }
}

}  // namespace
}  // namespace ein
