// The runtime helpers' kernels (fills, copies, plain reductions) are built once per thread per
// signature (run_kernel.h's run_built_kernel): a kernel is built again for anything its
// signature or origin holds that differs, its params are the launch's, and the values stay
// right whichever layout comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <ein/tensor.h>

#include "exec/run_kernel.h"
#include "exec/tensor_kernels.h"

namespace ein {
namespace {

/// Runs a one-param fill of `out` through run_built_kernel with `signature` and `origin`,
/// counting the builds in `builds`.
void built_fill(const Tensor& out, std::vector<int64_t> signature, const std::string& origin,
                double value, int& builds) {
  const auto build = [&] {
    ++builds;
    Kernel k;
    k.name = "test_fill";
    k.domain = out.shape();
    k.compute = DType::f64;
    k.add_output(out.dtype(), out.strides());
    k.store(0, k.param(0));
    return k;
  };
  const Tensor buffers[] = {out};
  const double params[] = {value};
  run_built_kernel(signature, origin, build, params, buffers);
}

void expect_all(const Tensor& t, double want, const std::string& what) {
  for (double v : t.to_vector<double>())
    ASSERT_EQ(v, want) << what;
}

TEST(BuiltKernels, BuildOncePerSignatureAndOriginWithTheLaunchsParams) {
  const Tensor out = empty({3, 5}, DType::f32);
  int builds = 0;
  built_fill(out, {901, 3, 5}, "a", 1.5, builds);
  expect_all(out, 1.5, "first launch");
  built_fill(out, {901, 3, 5}, "a", -2, builds);
  EXPECT_EQ(builds, 1) << "the same signature and origin build nothing";
  expect_all(out, -2, "second launch: its own param");
  built_fill(out, {901, 3, 6}, "a", 3, builds);
  EXPECT_EQ(builds, 2) << "another signature builds its own kernel";
  built_fill(out, {901, 3, 5}, "b", 4, builds);
  EXPECT_EQ(builds, 3) << "another origin builds its own kernel";
  expect_all(out, 4, "third kernel");
}

TEST(BuiltKernels, FillsKeepTheirValues) {
  const Tensor base = empty({4, 8}, DType::f32);
  const Tensor strided = base.slice(1, 0, 8, 2);  // [4, 4], strides (8, 2)
  const Tensor dense = empty({4, 4}, DType::f32);
  for (int round = 0; round < 2; ++round)
    for (double v : {0.5, -3.0}) {
      fill_into(dense, v + round);
      fill_into(strided, -v);
      expect_all(dense, v + round, "dense round " + std::to_string(round));
      expect_all(strided, -v, "strided round " + std::to_string(round));
    }
  // The strided fill wrote every other column only.
  fill_into(base, 7);
  fill_into(strided, 1);
  const std::vector<double> all = base.to_vector<double>();
  for (size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(all[i], i % 2 == 0 ? 1 : 7) << "element " << i;
}

TEST(BuiltKernels, FillsOfSpecialValuesGoThroughTheKeptKernel) {
  // One kernel for the whole loop: each value is the launch's param, never the first one's.
  const Tensor t = empty({2, 3}, DType::f32);
  const double inf = std::numeric_limits<double>::infinity();
  const double subnormal = std::numeric_limits<float>::denorm_min();
  for (double v : {1.0, std::nan(""), -0.0, inf, -inf, subnormal, 0.0}) {
    fill_into(t, v);
    for (double got : t.to_vector<double>()) {
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(got));
        continue;
      }
      EXPECT_EQ(got, v);
      EXPECT_EQ(std::signbit(got), std::signbit(v)) << "fill of " << v;
    }
  }
}

TEST(BuiltKernels, CopiesOfEachLayoutStayRight) {
  const Tensor wide = randn({4, 12}, DType::f32, cpu(), 1);
  const Tensor tall = randn({6, 4}, DType::f32, cpu(), 2);
  const std::vector<std::pair<std::string, Tensor>> sources = {
      {"contiguous", randn({4, 6}, DType::f32, cpu(), 3)},
      {"strided", wide.slice(1, 0, 12, 2)},
      {"transposed", tall.permute({1, 0})},
      {"f64", randn({4, 6}, DType::f64, cpu(), 4)}};
  for (int round = 0; round < 2; ++round)
    for (const auto& [name, src] : sources) {
      const Tensor dst = empty({4, 6}, DType::f32);
      copy_into(dst, src);
      const std::vector<double> want = src.to(DType::f32).to_vector<double>();
      EXPECT_EQ(dst.to_vector<double>(), want) << name << " round " << round;
    }
}

TEST(BuiltKernels, ReductionsOfEachKindAndLayoutStayRight) {
  const Tensor tall = randn({6, 4}, DType::f32, cpu(), 5);
  const Tensor contiguous = randn({4, 6}, DType::f32, cpu(), 6);
  const Tensor transposed = tall.permute({1, 0});
  for (int round = 0; round < 2; ++round)
    for (const Tensor& x : {contiguous, transposed})
      for (Reduction r : {Reduction::sum, Reduction::mean, Reduction::max}) {
        const std::vector<double> got =
            reduce_dims(x, {false, true}, r, std::nullopt).to_vector<double>();
        const std::vector<double> xs = x.contiguous().to_vector<double>();
        ASSERT_EQ(got.size(), 4u);
        for (size_t i = 0; i < 4; ++i) {
          double sum = 0, max = xs[i * 6];
          for (size_t j = 0; j < 6; ++j) {
            sum += xs[i * 6 + j];
            max = std::max(max, xs[i * 6 + j]);
          }
          const double want = r == Reduction::sum ? sum : r == Reduction::mean ? sum / 6 : max;
          EXPECT_NEAR(got[i], want, 1e-5) << reduction_name(r) << " row " << i << " round " << round
                                          << (x.is_contiguous() ? "" : " transposed");
        }
      }
}

}  // namespace
}  // namespace ein
