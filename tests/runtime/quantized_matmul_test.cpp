// ein::quantized_matmul (include/ein/quantize.h) against the float64 reference: x @ the exact
// dequantized weight, for q8_0 and q4_0, through each of its paths (the rows' kernel on full
// and partial column chunks, the dequantized panels' GEMM for many rows), on odd sizes,
// partial blocks, batch axes, non-contiguous and bf16 inputs, zero sizes, the special values
// (±0, ±inf, NaN, subnormals, values whose product with a scale overflows) and all-zero
// blocks; on each instruction set this CPU has (AVX-512, AVX2, portable); every mistake an
// error naming it; and what FlopCounter counts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <ein/autograd.h>
#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/quantize.h>

#include "runtime/quantize_layout.h"

namespace ein {
namespace {

/// Runs `body` on each instruction set of quantized_matmul's kernels this CPU has.
template <typename F>
void for_each_kernel_set(F body) {
  using detail::QuantKernels;
  for (QuantKernels set : {QuantKernels::avx512, QuantKernels::avx2, QuantKernels::portable}) {
    if (!detail::force_quant_kernels(set)) continue;
    SCOPED_TRACE(std::string("kernels: ") + std::string(detail::quant_kernels_name(set)));
    body();
  }
  detail::force_quant_kernels(std::nullopt);
}

std::vector<float> normal_values(int64_t count, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v)
    x = normal(rng) * scale;
  return v;
}

/// Checks y (rows × n) against x (rows × k) @ w in float64, w the exact dequantized values:
/// NaN where the reference is NaN, the same infinities, and finite values within f32's
/// summation error, 2·k·2^-24 · Σ|x·w|.
void expect_reference(const std::vector<float>& x, const std::vector<float>& w,
                      const std::vector<float>& y, int64_t rows, int64_t k, int64_t n,
                      const std::string& what) {
  ASSERT_EQ(y.size(), static_cast<size_t>(rows * n)) << what;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(x[r * k + i]) * static_cast<double>(w[i * n + c]);
        sum += p;
        magnitude += std::fabs(p);
      }
      const float got = y[r * n + c];
      const std::string at = what + " at [" + std::to_string(r) + ", " + std::to_string(c) + "]";
      if (std::isnan(sum)) {
        EXPECT_TRUE(std::isnan(got)) << at << ": " << got;
      } else if (std::isinf(sum)) {
        EXPECT_EQ(got, sum) << at;
      } else {
        const double tol = 2.0 * static_cast<double>(k) * 0x1p-24 * magnitude + 1e-37;
        ASSERT_LE(std::fabs(got - sum), tol) << at << ": " << got << " vs " << sum;
      }
    }
}

struct Case {
  int64_t m, k, n;
};

TEST(QuantizedMatmul, MatchesTheFloat64ReferenceOnEveryPath) {
  // m ≤ 8: the rows' kernel (full 128-column chunks, a partial last chunk, partial blocks; k
  // in 1, 2 and 4 parts summed apart); m > 8: dequantized panels of 512 columns and the GEMM.
  const Case cases[] = {{1, 64, 256},  {1, 100, 300},  {1, 1, 32},    {3, 37, 129},
                        {4, 64, 128},  {5, 96, 385},   {8, 33, 640},  {9, 50, 200},
                        {33, 70, 600}, {2, 300, 31},   {1, 1030, 130}, {2, 300, 1000}};
  uint32_t seed = 1;
  for_each_kernel_set([&] {
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0})
    for (const Case& c : cases) {
      const std::string what = std::string(quant_type_name(type)) + " m=" + std::to_string(c.m) +
                               " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n);
      const QuantizedTensor q =
          quantize(from_data(normal_values(c.k * c.n, seed++, 0.05f), {c.k, c.n}), type);
      const std::vector<float> x = normal_values(c.m * c.k, seed++);
      const Tensor y = quantized_matmul(from_data(x, {c.m, c.k}), q);
      EXPECT_EQ(y.shape(), (Shape{c.m, c.n})) << what;
      EXPECT_EQ(y.dtype(), DType::f32) << what;
      expect_reference(x, dequantize(q).to_vector<float>(), y.to_vector<float>(), c.m, c.k, c.n,
                       what);
    }
  });
}

/// w (rows × cols, row-major) transposed.
std::vector<float> transposed(const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<float> t(w.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      t[j * rows + i] = w[i * cols + j];
  return t;
}

TEST(QuantizedMatmul, OutInWeightsMatchTheFloat64ReferenceOnEveryPath) {
  // w [n, k], blocks along k (the summed axis): x @ wᵀ. m ≤ 8: one dot product per column,
  // whole blocks in registers and a partial last one; m > 8: dequantized panels of 512 rows.
  // Columns in ranges of 65536 / k, one task each: {1, 64, 3000} and {3, 1024, 200} take
  // several.
  const Case cases[] = {{1, 64, 256}, {1, 100, 300}, {1, 1, 32},     {2, 768, 70},
                        {3, 37, 129}, {4, 64, 128},  {5, 96, 385},   {7, 33, 9},
                        {8, 160, 640}, {9, 50, 200}, {33, 70, 600},  {1, 64, 3000},
                        {3, 1024, 200}};
  uint32_t seed = 100;
  for_each_kernel_set([&] {
  for (QuantType type : {QuantType::q8_0, QuantType::q4_0})
    for (const Case& c : cases) {
      const std::string what = std::string(quant_type_name(type)) + " out_in m=" +
                               std::to_string(c.m) + " k=" + std::to_string(c.k) +
                               " n=" + std::to_string(c.n);
      const QuantizedTensor q =
          quantize(from_data(normal_values(c.n * c.k, seed++, 0.05f), {c.n, c.k}), type);
      const std::vector<float> x = normal_values(c.m * c.k, seed++);
      const Tensor y = quantized_matmul(from_data(x, {c.m, c.k}), q, WeightLayout::out_in);
      EXPECT_EQ(y.shape(), (Shape{c.m, c.n})) << what;
      expect_reference(x, transposed(dequantize(q).to_vector<float>(), c.n, c.k),
                       y.to_vector<float>(), c.m, c.k, c.n, what);
    }
  });
}

TEST(QuantizedMatmul, OutInStridesSpecialValuesZeroSizesAndCounts) {
  const int64_t k = 100, n = 72;
  std::vector<float> wv = normal_values(n * k, 11);
  for (int64_t c = 0; c < 32; ++c) wv[5 * k + c] = 0.0f;  // row 5's first block: scale 0
  const QuantizedTensor q = quantize(from_data(wv, {n, k}), QuantType::q8_0);
  const std::vector<float> wt = transposed(dequantize(q).to_vector<float>(), n, k);
  for (const int64_t m : {1, 3, 12}) {
    std::vector<float> x = normal_values(m * k, 12);
    x[0] = std::nanf("");                                     // row 0: NaN everywhere
    if (m > 1) x[k + 3] = std::numeric_limits<float>::infinity(), x[k + 4] = -0.0f;
    if (m > 2) x[2 * k + 7] = std::numeric_limits<float>::denorm_min(), x[2 * k + 8] = 1e-40f;
    const Tensor y = quantized_matmul(from_data(x, {m, k}), q, WeightLayout::out_in);
    expect_reference(x, wt, y.to_vector<float>(), m, k, n, "out_in special, m=" + std::to_string(m));
  }
  // a transposed x gives what its copy gives; batch axes are rows
  const Tensor xt = from_data(normal_values(6 * k, 13), {k, 6}).transpose(0, 1);
  EXPECT_EQ(quantized_matmul(xt, q, WeightLayout::out_in).to_vector<float>(),
            quantized_matmul(xt.contiguous(), q, WeightLayout::out_in).to_vector<float>());
  EXPECT_EQ(quantized_matmul(zeros({2, 3, k}), q, WeightLayout::out_in).shape(), (Shape{2, 3, n}));
  EXPECT_EQ(quantized_matmul(zeros({0, k}), q, WeightLayout::out_in).shape(), (Shape{0, n}));
  const QuantizedTensor empty_k = quantize(zeros({5, 0}), QuantType::q4_0);
  EXPECT_EQ(quantized_matmul(zeros({2, 0}), empty_k, WeightLayout::out_in).to_vector<float>(),
            std::vector<float>(10, 0.0f));
  try {
    quantized_matmul(zeros({2, n}), q, WeightLayout::out_in);
    ADD_FAILURE() << "no error for x's last axis";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("x's last axis must be k = 100"), std::string::npos)
        << e.what();
  }
  FlopCounter counter;
  (void)quantized_matmul(zeros({2, k}), q, WeightLayout::out_in);
  EXPECT_EQ(counter.totals().flops, 2 * 2 * k * n);
  EXPECT_EQ(counter.totals().bytes_read, 2 * k * 4 + q.nbytes());
}

TEST(QuantizedMatmul, BatchAxesStridesDtypesAndZeroSizes) {
  const int64_t k = 70, n = 160;
  const QuantizedTensor q = quantize(from_data(normal_values(k * n, 3), {k, n}), QuantType::q4_0);
  const std::vector<float> wd = dequantize(q).to_vector<float>();
  // x [2, 3, k]: rows are the leading axes together
  const std::vector<float> x = normal_values(2 * 3 * k, 4);
  const Tensor y = quantized_matmul(from_data(x, {2, 3, k}), q);
  EXPECT_EQ(y.shape(), (Shape{2, 3, n}));
  expect_reference(x, wd, y.to_vector<float>(), 6, k, n, "batch axes");
  // a transposed x (strides {1, 6}) gives what its contiguous copy gives
  const Tensor xt = from_data(x, {k, 6}).transpose(0, 1);
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_EQ(quantized_matmul(xt, q).to_vector<float>(),
            quantized_matmul(xt.contiguous(), q).to_vector<float>());
  // bf16 in, bf16 out: the f32 result rounded once
  const Tensor xb = from_data(x, {6, k}).to(DType::bf16);
  const Tensor yb = quantized_matmul(xb, q);
  EXPECT_EQ(yb.dtype(), DType::bf16);
  EXPECT_EQ(yb.to_vector<float>(),
            quantized_matmul(xb.to(DType::f32), q).to(DType::bf16).to_vector<float>());
  // zero sizes: no rows, no columns, and k = 0 (a sum of nothing: zeros)
  EXPECT_EQ(quantized_matmul(zeros({0, k}), q).shape(), (Shape{0, n}));
  const QuantizedTensor none = quantize(zeros({k, 0}), QuantType::q8_0);
  EXPECT_EQ(quantized_matmul(zeros({4, k}), none).shape(), (Shape{4, 0}));
  const QuantizedTensor empty_k = quantize(zeros({0, 64}), QuantType::q8_0);
  const Tensor z = quantized_matmul(full({3, 0}, 1.0), empty_k);
  EXPECT_EQ(z.shape(), (Shape{3, 64}));
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(3 * 64, 0.0f));
}

TEST(QuantizedMatmul, SpecialValuesPropagateAsInTheReference) {
  // Columns 0-31 of w all zero (scale 0): inf · 0 is NaN there, as in x @ dequantize(w).
  for_each_kernel_set([&] {
  for (const int64_t m : {1, 2, 3, 12}) {  // the rows' kernel (folded: 1, 2) and the GEMM
    const int64_t k = 40, n = 256;
    std::vector<float> wv = normal_values(k * n, 5);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t c = 0; c < 32; ++c)
        wv[i * n + c] = 0.0f;
    const QuantizedTensor q = quantize(from_data(wv, {k, n}), QuantType::q8_0);
    std::vector<float> x = normal_values(m * k, 6);
    const float inf = std::numeric_limits<float>::infinity();
    x[0] = std::nanf("");                                 // row 0: NaN everywhere
    if (m > 1) x[1 * k + 3] = inf, x[1 * k + 4] = -0.0f;  // row 1: ±inf per column's sign
    if (m > 2) x[2 * k + 7] = std::numeric_limits<float>::denorm_min(), x[2 * k + 8] = 1e-40f;
    const Tensor y = quantized_matmul(from_data(x, {m, k}), q);
    expect_reference(x, dequantize(q).to_vector<float>(), y.to_vector<float>(), m, k, n,
                     "special values, m=" + std::to_string(m));
  }
  });
}

TEST(QuantizedMatmul, AnXThatOverflowsTimesAScaleAddsZeroWhereTheCodeIsZero) {
  // x[0, 4] = 2e36 and row 4 of w's first block ±40000 (scale 315), but column 5 is 0: x ·
  // scale overflows f32, yet the reference adds 2e36 · 0 = 0 to y[0, 5] (finite), and ±inf to
  // the block's other columns, whose products overflow. The kernels that fold the scale into x
  // must not make that 0 a NaN.
  for_each_kernel_set([&] {
    for (const int64_t m : {1, 2, 3, 12}) {
      const int64_t k = 9, n = 64;
      std::vector<float> wv = normal_values(k * n, 7, 0.05f);
      for (int64_t c = 0; c < 32; ++c)
        wv[4 * n + c] = c == 5 ? 0.0f : (c % 2 ? 40000.0f : -40000.0f);
      const QuantizedTensor q = quantize(from_data(wv, {k, n}), QuantType::q8_0);
      std::vector<float> x = normal_values(m * k, 8);
      x[4] = 2e36f;
      const std::vector<float> w = dequantize(q).to_vector<float>();
      const std::vector<float> y = quantized_matmul(from_data(x, {m, k}), q).to_vector<float>();
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
          const std::string at = "m=" + std::to_string(m) + " at [" + std::to_string(r) + ", " +
                                 std::to_string(c) + "]";
          const float got = y[r * n + c];
          if (r == 0 && c < 32 && c != 5) {
            EXPECT_EQ(got, (c % 2 ? 1 : -1) * std::numeric_limits<float>::infinity()) << at;
            continue;
          }
          double sum = 0, magnitude = 0;
          for (int64_t i = 0; i < k; ++i) {
            sum += static_cast<double>(x[r * k + i]) * w[i * n + c];
            magnitude += std::fabs(static_cast<double>(x[r * k + i]) * w[i * n + c]);
          }
          ASSERT_FALSE(std::isnan(got)) << at;
          EXPECT_LE(std::fabs(got - sum), 2.0 * k * 0x1p-24 * magnitude + 1e-37) << at;
        }
    }
  });
}

TEST(QuantizedMatmul, MistakesAreErrorsNamingThem) {
  const QuantizedTensor q = quantize(zeros({64, 32}), QuantType::q8_0);
  const auto message = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              quantized_matmul(zeros({2, 63}), q);
            }).find("x's last axis must be k = 64"),
            std::string::npos);
  EXPECT_NE(message([&] {
              quantized_matmul(zeros({2, 64}).to(DType::f64), q);
            }).find("f64"),
            std::string::npos);
  EXPECT_NE(message([&] {
              quantized_matmul(zeros({2, 64}), quantize(zeros({2, 64, 32}), QuantType::q8_0));
            }).find("as a matrix"),
            std::string::npos);
  QuantizedTensor bad = q;
  bad.codes = zeros({64, 32}, DType::u8);
  EXPECT_NE(message([&] {
              quantized_matmul(zeros({2, 64}), bad);
            }).find("quantized_matmul: the q8_0 codes"),
            std::string::npos);
  const Tensor x = zeros({2, 64}).requires_grad_();
  EXPECT_NE(message([&] { quantized_matmul(x, q); }).find("no gradient"), std::string::npos);
  const NoGrad no_grad;
  EXPECT_EQ(quantized_matmul(x, q).shape(), (Shape{2, 32}));
}

TEST(QuantizedMatmul, FlopCounterCountsItsWorkAndTheQuantizedBytes) {
  for (const int64_t m : {2, 20}) {  // the panels' GEMMs add launches, not FLOPs
    const int64_t k = 96, n = 640;
    const QuantizedTensor q = quantize(from_data(normal_values(k * n, 7), {k, n}), QuantType::q4_0);
    const Tensor x = from_data(normal_values(m * k, 8), {m, k});
    FlopCounter counter;
    (void)quantized_matmul(x, q);
    const CostTotals& t = counter.totals();
    EXPECT_EQ(t.flops, 2 * m * k * n) << m;
    EXPECT_EQ(t.matmul_flops, 2 * m * k * n) << m;
    EXPECT_EQ(t.bytes_read, m * k * 4 + q.nbytes()) << m;
    EXPECT_EQ(q.nbytes() * 8, static_cast<int64_t>(k * n * 4.5)) << m;
    EXPECT_EQ(t.bytes_written, m * n * 4) << m;
    EXPECT_EQ(t.kernels, m > 8 ? 1 + 2 : 1) << m;  // 640 columns: two panels of 512 and 128
    ASSERT_TRUE(counter.by_origin().contains("quantized_matmul"));
  }
}

}  // namespace
}  // namespace ein
