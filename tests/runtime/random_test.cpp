// Philox4x32-10 against the published known-answer vectors, determinism per (seed, index),
// independence from the thread count, and the moments of randn.
#include <gtest/gtest.h>

#include <tbb/global_control.h>
#include <cmath>

#include "runtime/parallel.h"
#include "runtime/random.h"
#include <ein/tensor.h>

namespace ein {
namespace {

// Known-answer vectors from Random123's kat_vectors (philox4x32 with 10 rounds).
TEST(Random, PhiloxKnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxBlock{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxBlock{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, SameSeedSameValuesDifferentSeedDifferent) {
  const auto a = rand({1000}, DType::f32, cpu(), 42).to_vector<float>();
  const auto b = rand({1000}, DType::f32, cpu(), 42).to_vector<float>();
  const auto c = rand({1000}, DType::f32, cpu(), 43).to_vector<float>();
  EXPECT_EQ(a, b);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i)
    same += a[i] == c[i];
  EXPECT_LT(same, 5);  // 24-bit values: a chance match is ~1000 * 2^-24
  EXPECT_EQ(randn({7}, DType::f64, cpu(), 5).to_vector<double>(),
            randn({7}, DType::f64, cpu(), 5).to_vector<double>());
}

TEST(Random, ElementDependsOnlyOnSeedAndIndex) {
  const auto big = rand({100}, DType::f64, cpu(), 9).to_vector<double>();
  const auto small = rand({10}, DType::f64, cpu(), 9).to_vector<double>();
  for (size_t i = 0; i < small.size(); ++i) {
    EXPECT_EQ(small[i], big[i]);
    EXPECT_EQ(big[i], uniform_at(9, i));
  }
  EXPECT_EQ(randn({3}, DType::f64, cpu(), 9).to_vector<double>()[2], normal_at(9, 2));
}

TEST(Random, IndependentOfThreadCount) {
  const Shape sizes = {3, 1000, 1000};  // above the parallel grain
  std::vector<float> u1, n1, u2, n2;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    ASSERT_EQ(num_threads(), 1);
    u1 = rand(sizes, DType::f32, cpu(), 7).to_vector<float>();
    n1 = randn(sizes, DType::f32, cpu(), 7).to_vector<float>();
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    u2 = rand(sizes, DType::f32, cpu(), 7).to_vector<float>();
    n2 = randn(sizes, DType::f32, cpu(), 7).to_vector<float>();
  }
  EXPECT_EQ(u1, u2);
  EXPECT_EQ(n1, n2);
}

TEST(Random, UniformStaysBelowOneInEveryFloatDType) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2}) {
    const auto v = rand({20000}, d, cpu(), 3).to_vector<double>();
    double lo = 1, hi = 0;
    for (double x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_GE(lo, 0.0) << dtype_name(d);
    EXPECT_LT(hi, 1.0) << dtype_name(d);
  }
  EXPECT_THROW(rand({2}, DType::i32), RuntimeError);
}

TEST(Random, MomentsOfOneMillionNormals) {
  const int64_t n = 1 << 20;
  const auto v = randn({n}, DType::f64, cpu(), 2024).to_vector<double>();
  double sum = 0, sq = 0;
  for (double x : v)
    sum += x;
  const double mean = sum / static_cast<double>(n);
  for (double x : v)
    sq += (x - mean) * (x - mean);
  const double var = sq / static_cast<double>(n - 1);
  // For N(0, 1): the sample mean has standard deviation 1/sqrt(n) ~ 0.001 and the sample
  // variance sqrt(2/(n-1)) ~ 0.0014. Five standard deviations (a false alarm once in ~3.5
  // million seeds) gives the tolerances 0.005 and 0.007.
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(var, 1.0, 0.007);
  // Uniform on [0, 1): mean 1/2 (sd 1/sqrt(12 n) ~ 0.00028), variance 1/12.
  const auto u = rand({n}, DType::f64, cpu(), 2024).to_vector<double>();
  double us = 0;
  for (double x : u)
    us += x;
  EXPECT_NEAR(us / static_cast<double>(n), 0.5, 0.0015);
}

}  // namespace
}  // namespace ein
