// cuBLASLt GEMMs (runtime/cuda/cublaslt.h). Without a GPU: the row-major → column-major mapping as
// a pure function (the layouts it computes for each transpose, padded leading dimensions and
// batch strides, dtypes and math, its refusals), the mapping's meaning (the plan executed by a
// naive column-major interpreter of cuBLASLt's semantics equals the CPU's row-major
// gemm_batched on random f64 data), and the plan's descriptors created in the real cuBLASLt
// library and read back (host-only calls). With a GPU: batched GEMMs in f32, tf32, bf16, f16
// against a float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/blas/gemm.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/backend.h"
#include <ein/tensor.h>

namespace ein {
namespace {

constexpr int kR32F = 0, kR64F = 1, kR16F = 2, kR16BF = 14;
constexpr int kCompute32F = 68, kCompute32FFastTf32 = 77, kCompute64F = 70;

GemmBatch gemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, int64_t pad = 0) {
  GemmBatch g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = ta;
  g.trans_b = tb;
  g.lda = std::max<int64_t>(1, ta ? m : k) + pad;  // GemmBatch's rule: ≥ max(1, row)
  g.ldb = std::max<int64_t>(1, tb ? k : n) + pad;
  g.ldc = std::max<int64_t>(1, n) + pad;
  return g;
}

TEST(CublasLtPlan, NoTransposeSwapsTheOperandsAndKeepsTheLeadingDimensions) {
  int a = 0, b = 0, c = 0;  // only the addresses matter
  GemmBatch g = gemm(3, 5, 4, false, false);
  g.a = &a;
  g.b = &b;
  g.c = &c;
  const CublasLtPlan p = plan_cublaslt_gemm(g);
  EXPECT_FALSE(p.empty);
  // Row-major B (4×5, ld 5) read column-major is 5×4 with ld 5: cuBLASLt's A, untransposed.
  EXPECT_EQ(p.a, (CublasLtLayout{kR32F, 5, 4, 5, 1, 0}));
  EXPECT_FALSE(p.trans_a);
  EXPECT_EQ(p.b, (CublasLtLayout{kR32F, 4, 3, 4, 1, 0}));  // row-major A (3×4, ld 4)
  EXPECT_FALSE(p.trans_b);
  EXPECT_EQ(p.c, (CublasLtLayout{kR32F, 5, 3, 5, 1, 0}));  // Cᵀ: n×m, ld ldc
  EXPECT_EQ(p.a_ptr, &b);
  EXPECT_EQ(p.b_ptr, &a);
  EXPECT_EQ(p.c_ptr, &c);
  EXPECT_EQ(p.compute_type, kCompute32F);
  EXPECT_EQ(p.scale_type, kR32F);
}

TEST(CublasLtPlan, TransposesBecomeTransposedOperandsOfTheOtherSide) {
  // A stored k×m (trans_a) → cuBLASLt's B is m×k (ld lda) with op T.
  const CublasLtPlan ta = plan_cublaslt_gemm(gemm(3, 5, 4, true, false));
  EXPECT_TRUE(ta.trans_b);
  EXPECT_FALSE(ta.trans_a);
  EXPECT_EQ(ta.b, (CublasLtLayout{kR32F, 3, 4, 3, 1, 0}));
  // B stored n×k (trans_b) → cuBLASLt's A is k×n (ld ldb) with op T.
  const CublasLtPlan tb = plan_cublaslt_gemm(gemm(3, 5, 4, false, true));
  EXPECT_TRUE(tb.trans_a);
  EXPECT_FALSE(tb.trans_b);
  EXPECT_EQ(tb.a, (CublasLtLayout{kR32F, 4, 5, 4, 1, 0}));
  const CublasLtPlan both = plan_cublaslt_gemm(gemm(3, 5, 4, true, true));
  EXPECT_TRUE(both.trans_a && both.trans_b);
}

TEST(CublasLtPlan, PaddedLeadingDimensionsAndBatchStridesCarryOver) {
  GemmBatch g = gemm(8, 16, 32, false, true, /*pad=*/3);
  g.batch = 12;
  g.stride_a = 0;  // A broadcast over the batch
  g.stride_b = 16 * 35;
  g.stride_c = 8 * 19 + 5;
  const CublasLtPlan p = plan_cublaslt_gemm(g);
  EXPECT_EQ(p.a, (CublasLtLayout{kR32F, 32, 16, 35, 12, 16 * 35}));  // B: n×k stored, ld 35
  EXPECT_EQ(p.b, (CublasLtLayout{kR32F, 32, 8, 35, 12, 0}));         // A: m×k stored, ld 35
  EXPECT_EQ(p.c, (CublasLtLayout{kR32F, 16, 8, 19, 12, 8 * 19 + 5}));
}

TEST(CublasLtPlan, DtypesAndMathPickTheTypesAndComputeMode) {
  GemmBatch g = gemm(2, 2, 2, false, false);
  EXPECT_EQ(plan_cublaslt_gemm(g, GemmMath::tf32).compute_type, kCompute32FFastTf32);
  g.dtype = DType::bf16;
  CublasLtPlan p = plan_cublaslt_gemm(g);
  EXPECT_EQ(p.a.data_type, kR16BF);
  EXPECT_EQ(p.c.data_type, kR16BF);
  EXPECT_EQ(p.compute_type, kCompute32F);  // f32 accumulation
  EXPECT_EQ(p.scale_type, kR32F);
  g.dtype = DType::f16;
  p = plan_cublaslt_gemm(g);
  EXPECT_EQ(p.b.data_type, kR16F);
  EXPECT_EQ(p.compute_type, kCompute32F);
  g.dtype = DType::f64;
  p = plan_cublaslt_gemm(g);
  EXPECT_EQ(p.c.data_type, kR64F);
  EXPECT_EQ(p.compute_type, kCompute64F);
  EXPECT_EQ(p.scale_type, kR64F);
}

void expect_refused(const GemmBatch& g, GemmMath math, const std::string& part) {
  try {
    (void)plan_cublaslt_gemm(g, math);
    ADD_FAILURE() << "expected a RuntimeError containing: " << part;
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(CublasLtPlan, RefusesWhatCuBlasLtCannotRun) {
  GemmBatch g = gemm(4, 4, 4, false, false);
  g.dtype = DType::i32;
  expect_refused(g, GemmMath::exact, "dtype i32 is not supported");
  g.dtype = DType::bf16;
  expect_refused(g, GemmMath::tf32, "TF32 math is for f32 inputs, not bf16");
  g = gemm(4, 4, 4, false, false);
  g.lda = 3;
  expect_refused(g, GemmMath::exact, "lda = 3 is smaller than its row of 4 elements");
  g = gemm(4, 4, 4, false, false);
  g.batch = 2;
  g.stride_a = g.stride_b = 16;
  expect_refused(g, GemmMath::exact, "C's batch stride 0");
  expect_refused(gemm(4, 4, 0, false, false), GemmMath::exact, "k = 0");
  EXPECT_TRUE(plan_cublaslt_gemm(gemm(0, 4, 4, false, false)).empty);
  EXPECT_TRUE(plan_cublaslt_gemm(gemm(4, 0, 0, false, false)).empty);
}

// cuBLASLt's semantics, naively: D[i] = alpha·op(A[i])·op(B[i]) + beta·C[i], column-major.
void run_plan_column_major(const CublasLtPlan& p, double alpha, double beta) {
  const auto* A = static_cast<const double*>(p.a_ptr);
  const auto* B = static_cast<const double*>(p.b_ptr);
  auto* C = static_cast<double*>(p.c_ptr);
  const auto rows = static_cast<int64_t>(p.c.rows), cols = static_cast<int64_t>(p.c.cols);
  const auto inner = static_cast<int64_t>(p.trans_a ? p.a.rows : p.a.cols);
  auto at = [](const double* base, const CublasLtLayout& l, int64_t batch, int64_t r, int64_t c) {
    return base[batch * l.batch_stride + r + c * l.ld];
  };
  for (int64_t t = 0; t < p.c.batch_count; ++t)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < inner; ++l)
          sum += (p.trans_a ? at(A, p.a, t, l, i) : at(A, p.a, t, i, l)) *
                 (p.trans_b ? at(B, p.b, t, j, l) : at(B, p.b, t, l, j));
        double& d = C[t * p.c.batch_stride + i + j * p.c.ld];
        d = alpha * sum + (beta == 0 ? 0 : beta * d);
      }
}

TEST(CublasLtPlan, ThePlanComputesWhatTheRowMajorGemmComputes) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  for (int trial = 0; trial < 24; ++trial) {
    const bool ta = trial & 1, tb = trial & 2;
    const int64_t pad = trial % 3, batch = 1 + trial % 4;
    GemmBatch g = gemm(1 + rng() % 7, 1 + rng() % 9, 1 + rng() % 6, ta, tb, pad);
    g.dtype = DType::f64;
    g.batch = batch;
    const int64_t a_rows = ta ? g.k : g.m, b_rows = tb ? g.n : g.k;
    g.stride_a = trial % 5 == 0 ? 0 : a_rows * g.lda + 2;  // sometimes broadcast
    g.stride_b = b_rows * g.ldb + 1;
    g.stride_c = g.m * g.ldc + 3;
    g.alpha = 0.5 + trial * 0.25;
    g.beta = trial % 2 ? 0.0 : -1.5;
    std::vector<double> a(batch * (a_rows * g.lda + 2)), b(batch * (b_rows * g.ldb + 1)),
        c(batch * g.stride_c);
    for (auto* v : {&a, &b, &c})
      for (double& x : *v)
        x = normal(rng);
    std::vector<double> expected = c, got = c;
    g.a = a.data();
    g.b = b.data();
    g.c = expected.data();
    gemm_batched(g);  // the CPU's row-major GEMM
    g.c = got.data();
    run_plan_column_major(plan_cublaslt_gemm(g), g.alpha, g.beta);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], expected[i], 1e-12 * (1 + std::abs(expected[i])))
          << "trial " << trial << " element " << i << " (m " << g.m << " n " << g.n << " k " << g.k
          << " ta " << ta << " tb " << tb << " batch " << batch << ")";
  }
}

TEST(CublasLtPlan, TheLibraryHoldsThePlansDescriptors) {
  if (!cublaslt_info().available) GTEST_SKIP() << cublaslt_info().reason;
  EXPECT_GE(cublaslt_info().version, 110000);
  GemmBatch g = gemm(8, 16, 32, true, false, 5);
  g.batch = 6;
  g.stride_a = 0;
  g.stride_b = 1000;
  g.stride_c = 2000;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    g.dtype = dtype;
    const CublasLtPlan p = plan_cublaslt_gemm(g);
    EXPECT_EQ(detail::cublaslt_descriptors_read_back(p), p) << dtype_name(dtype);
  }
  g.dtype = DType::f32;
  g.trans_a = false;
  g.trans_b = true;
  g.lda = 32;
  g.ldb = 40;
  const CublasLtPlan tf32 = plan_cublaslt_gemm(g, GemmMath::tf32);
  EXPECT_EQ(detail::cublaslt_descriptors_read_back(tf32), tf32);
}

// ---- on a GPU ----

struct GpuCase {
  DType dtype;
  GemmMath math;
  double tolerance;  // of |error| / (Σ|a·b| + |beta·c|), see below
};

TEST(CublasLtGemm, BatchedTransposedGemmsMatchAFloat64Reference) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_driver_info().reason;
  if (!cublaslt_info().available) GTEST_SKIP() << cublaslt_info().reason;
  // Bounds relative to Σ|a·b|: f32 accumulation error ~k·2⁻²⁴ (k ≤ 96: < 1e-5); TF32 rounds
  // each input to 10 mantissa bits (2⁻¹¹ each, ~1e-3 per product); bf16 and f16 outputs round
  // to 8 and 11 bits (2⁻⁸ ≈ 4e-3, 2⁻¹¹ ≈ 5e-4) while their inputs are exact in f32.
  const GpuCase cases[] = {{DType::f32, GemmMath::exact, 1e-5},
                           {DType::f32, GemmMath::tf32, 2e-3},
                           {DType::bf16, GemmMath::exact, 8e-3},
                           {DType::f16, GemmMath::exact, 1e-3}};
  const Stream stream = Stream::create(0);
  for (const GpuCase& cs : cases)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      GemmBatch g = gemm(37, 70, 96, ta, tb, /*pad=*/t);
      g.dtype = cs.dtype;
      g.batch = 3;
      const int64_t a_rows = ta ? g.k : g.m, b_rows = tb ? g.n : g.k;
      g.stride_a = a_rows * g.lda;
      g.stride_b = t == 3 ? 0 : b_rows * g.ldb;  // one case with B broadcast
      g.stride_c = g.m * g.ldc;
      g.alpha = 0.75;
      g.beta = 0.5;
      // Inputs rounded to the dtype first, so the reference sees exactly what the GPU sees.
      const Tensor a = randn({g.batch * g.stride_a}, DType::f32, cpu(), 1 + t).to(cs.dtype);
      const int64_t b_size = g.stride_b == 0 ? b_rows * g.ldb : g.batch * g.stride_b;
      const Tensor b = randn({b_size}, DType::f32, cpu(), 9 + t).to(cs.dtype);
      const Tensor c = randn({g.batch * g.stride_c}, DType::f32, cpu(), 17 + t).to(cs.dtype);
      const Tensor da = a.to(cuda()), db = b.to(cuda()), dc = c.to(cuda());
      g.a = da.storage()->data();
      g.b = db.storage()->data();
      g.c = dc.storage()->data();
      {
        StreamGuard guard(stream);
        cublaslt_gemm(g, cs.math, stream);
      }
      stream.synchronize();
      const std::vector<double> ha = a.to_vector<double>(), hb = b.to_vector<double>(),
                                hc = c.to_vector<double>(), got = dc.to_vector<double>();
      for (int64_t i = 0; i < g.batch; ++i)
        for (int64_t r = 0; r < g.m; ++r)
          for (int64_t col = 0; col < g.n; ++col) {
            double sum = 0, scale = 0;
            for (int64_t l = 0; l < g.k; ++l) {
              const double x = ha[i * g.stride_a + (ta ? l * g.lda + r : r * g.lda + l)];
              const double y = hb[i * g.stride_b + (tb ? col * g.ldb + l : l * g.ldb + col)];
              sum += x * y;
              scale += std::abs(x * y);
            }
            const size_t at = i * g.stride_c + r * g.ldc + col;
            const double expected = g.alpha * sum + g.beta * hc[at];
            const double bound = cs.tolerance * (g.alpha * scale + std::abs(g.beta * hc[at]));
            ASSERT_NEAR(got[at], expected, bound)
                << dtype_name(cs.dtype) << (cs.math == GemmMath::tf32 ? " tf32" : "") << " ta "
                << ta << " tb " << tb << " batch " << i << " (" << r << ", " << col << ")";
          }
    }
}

}  // namespace
}  // namespace ein
