// contract() and gemm_batched against a float64 loop over every index, on fresh random inputs:
// plain, transposed (checked to run without copies), batched, outer, dot, lone-axis sums,
// sliced, broadcast, zero-size inputs, and the f64/f16/bf16 dtypes.
//
// Tolerance. For a sum of K products computed in floating point with unit roundoff u, the
// error is at most γ_K·Σ|a·b| with γ_K = K·u/(1 − K·u) (Higham, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., §3.1); blocked BLAS kernels obey the same bound. We check
// |got − want| ≤ (K + 2)·u·Σ|a·b| per element (the +2 covers alpha and the store), with K the
// number of summed terms, u = 2⁻²⁴ for f32 and the f32-computed f16/bf16, 2⁻⁵³ for f64, plus
// for f16/bf16 one final rounding of the result: u_out·|want|, u_out = 2⁻¹¹ (f16), 2⁻⁸ (bf16).
// The bound is deterministic, so it never flakes, and it is tight enough that computing an f64
// contraction in f32 would fail it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "runtime/blas/contract.h"
#include "runtime/blas/gemm.h"

namespace ein {
namespace {

/// The float64 reference of contract(): out and Σ|a·b| per output element.
struct Reference {
  std::vector<double> value, magnitude;
  int64_t terms = 1;  ///< summed products per output element
};

Reference reference(const Tensor& a, const std::vector<int>& a_axes, const Tensor& b,
                    const std::vector<int>& b_axes, const std::vector<int>& out_axes) {
  std::map<int, int64_t> size;
  for (size_t d = 0; d < a_axes.size(); ++d)
    size[a_axes[d]] = a.shape()[d];
  for (size_t d = 0; d < b_axes.size(); ++d)
    size[b_axes[d]] = b.shape()[d];
  std::vector<int> all;
  for (auto [axis, s] : size)
    all.push_back(axis);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  int64_t out_numel = 1;
  for (int axis : out_axes)
    out_numel *= size[axis];
  Reference r;
  r.value.assign(static_cast<size_t>(out_numel), 0.0);
  r.magnitude.assign(static_cast<size_t>(out_numel), 0.0);
  for (auto [axis, s] : size) {
    if (std::find(out_axes.begin(), out_axes.end(), axis) == out_axes.end()) r.terms *= s;
  }
  std::map<int, int64_t> idx;
  for (int axis : all)
    idx[axis] = 0;
  auto linear = [&](const std::vector<int>& axes, const Shape& shape) {
    int64_t l = 0;
    for (size_t d = 0; d < axes.size(); ++d)
      l = l * shape[d] + idx[axes[d]];
    return l;
  };
  Shape out_shape;
  for (int axis : out_axes)
    out_shape.push_back(size[axis]);
  for (auto [axis, s] : size) {
    if (s == 0) return r;
  }
  while (true) {
    // A repeated id reads one index for both dims: the diagonal.
    const double p = av[static_cast<size_t>(linear(a_axes, a.shape()))] *
                     bv[static_cast<size_t>(linear(b_axes, b.shape()))];
    const auto o = static_cast<size_t>(linear(out_axes, out_shape));
    r.value[o] += p;
    r.magnitude[o] += std::abs(p);
    size_t i = all.size();
    while (i > 0) {
      --i;
      if (++idx[all[i]] < size[all[i]]) break;
      idx[all[i]] = 0;
      if (i == 0) return r;
    }
    if (all.empty()) return r;
  }
}

double unit_roundoff(DType compute) {
  return compute == DType::f64 ? 0x1p-53 : 0x1p-24;
}
double output_roundoff(DType dtype) {
  return dtype == DType::f16 ? 0x1p-11 : dtype == DType::bf16 ? 0x1p-8 : 0.0;
}

/// Runs contract and compares with the reference; returns the result.
Tensor check_contract(const Tensor& a, const std::vector<int>& a_axes, const Tensor& b,
                      const std::vector<int>& b_axes, const std::vector<int>& out_axes) {
  const Tensor got = contract(a, a_axes, b, b_axes, out_axes);
  const Reference want = reference(a, a_axes, b, b_axes, out_axes);
  EXPECT_EQ(got.dtype(), a.dtype());
  std::map<int, int64_t> size;
  for (size_t d = 0; d < a_axes.size(); ++d)
    size[a_axes[d]] = a.shape()[d];
  for (size_t d = 0; d < b_axes.size(); ++d)
    size[b_axes[d]] = b.shape()[d];
  Shape expected_shape;
  for (int axis : out_axes)
    expected_shape.push_back(size[axis]);
  EXPECT_EQ(got.shape(), expected_shape);
  const std::vector<double> g = got.to_vector<double>();
  EXPECT_EQ(g.size(), want.value.size());
  const double u = unit_roundoff(a.dtype() == DType::f64 ? DType::f64 : DType::f32);
  const double u_out = output_roundoff(a.dtype());
  int bad = 0;
  double max_err = 0;
  for (size_t i = 0; i < g.size() && i < want.value.size(); ++i) {
    const double err = std::abs(g[i] - want.value[i]);
    const double tol = static_cast<double>(want.terms + 2) * u * want.magnitude[i] +
                       u_out * std::abs(want.value[i]);
    max_err = std::max(max_err, err);
    if (err > tol && bad++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << g[i] << ", want " << want.value[i]
                    << " (error " << err << " > tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << "mismatches; max abs error " << max_err;
  return got;
}

uint64_t g_seed = 1;
Tensor random(Shape shape, DType dtype = DType::f32) {
  return randn(std::move(shape), dtype, cpu(), g_seed++);
}

/// Copies made by contract during `f`.
template <class F>
int64_t copies_during(F&& f) {
  const int64_t before = contract_stats().operand_copies;
  f();
  return contract_stats().operand_copies - before;
}

TEST(BlasContract, PlainMatmulMakesNoCopies) {
  const Tensor a = random({37, 53}), b = random({53, 29});
  Tensor c;
  EXPECT_EQ(copies_during([&] { c = check_contract(a, {0, 1}, b, {1, 2}, {0, 2}); }), 0);
  EXPECT_TRUE(c.is_contiguous());
}

TEST(BlasContract, TransposedOperandsFoldIntoBlasFlags) {
  const Tensor at = random({53, 37}).transpose(0, 1);  // a: (i j), column-major
  const Tensor bt = random({29, 53}).transpose(0, 1);  // b: (j k), column-major
  const Tensor a = random({37, 53}), b = random({53, 29});
  EXPECT_EQ(copies_during([&] {
              check_contract(at, {0, 1}, b, {1, 2}, {0, 2});
              check_contract(a, {0, 1}, bt, {1, 2}, {0, 2});
              check_contract(at, {0, 1}, bt, {1, 2}, {0, 2});
              // The transposed result: (k i) = Cᵀ = Bᵀ·Aᵀ, written contiguous.
              EXPECT_TRUE(check_contract(a, {0, 1}, b, {1, 2}, {2, 0}).is_contiguous());
            }),
            0);
}

TEST(BlasContract, AttentionScoresAndValues) {
  // scores: (b h q k) = q: (b h q d) · k: (b h k d); values: (b h q d) = p: (b h q k) · v.
  const Tensor q = random({2, 3, 17, 8}), k = random({2, 3, 19, 8}), v = random({2, 3, 19, 8});
  Tensor s;
  EXPECT_EQ(copies_during([&] {
              s = check_contract(q, {0, 1, 2, 4}, k, {0, 1, 3, 4}, {0, 1, 2, 3});
            }),
            0);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(copies_during([&] {
              check_contract(s, {0, 1, 2, 3}, v, {0, 1, 3, 4}, {0, 1, 2, 4});
            }),
            0);
}

TEST(BlasContract, MlpProjection) {
  // (b s f) = x: (b s d) · w: (d f): b and s merge into one m dimension.
  const Tensor x = random({4, 9, 16}), w = random({16, 24});
  Tensor y;
  EXPECT_EQ(copies_during([&] { y = check_contract(x, {0, 1, 2}, w, {2, 3}, {0, 1, 3}); }), 0);
  EXPECT_TRUE(y.is_contiguous());
}

TEST(BlasContract, OuterProductAndDot) {
  const Tensor x = random({13}), y = random({7});
  check_contract(x, {0}, y, {1}, {0, 1});
  check_contract(x, {0}, y, {1}, {1, 0});
  const Tensor z = random({13});
  const Tensor d = check_contract(x, {0}, z, {0}, {});
  EXPECT_EQ(d.dim(), 0);
}

TEST(BlasContract, LoneAxesAreSummedFirst) {
  const Tensor a = random({6, 5, 4}), b = random({4, 3, 2});
  check_contract(a, {0, 1, 2}, b, {2, 3, 4}, {0, 3});  // 1 lone in a, 4 lone in b
  check_contract(a, {0, 1, 2}, b, {2, 3, 4}, {});
}

TEST(BlasContract, DiagonalOfARepeatedAxis) {
  const Tensor a = random({5, 5}), b = random({5, 3});
  check_contract(a, {0, 0}, b, {0, 1}, {1});  // (j) = Σ_i a[i,i]·b[i,j]
}

TEST(BlasContract, SlicedAndBroadcastInputs) {
  const Tensor base = random({12, 40});
  const Tensor rows = base.slice(0, 1, 12, 2);  // (i j), row stride 80: folds, no copy
  const Tensor cols = base.slice(1, 0, 40, 2);  // (i j), column stride 2: must be copied
  const Tensor b = random({40, 6}), b2 = random({20, 6});
  EXPECT_EQ(copies_during([&] { check_contract(rows, {0, 1}, b, {1, 2}, {0, 2}); }), 0);
  EXPECT_EQ(copies_during([&] { check_contract(cols, {0, 1}, b2, {1, 2}, {0, 2}); }), 1);
  // A batch broadcast by expand (batch stride 0) folds without a copy.
  const Tensor shared = random({1, 7, 9}).expand({5, 7, 9});
  const Tensor per_batch = random({5, 9, 4});
  EXPECT_EQ(copies_during([&] {
              check_contract(shared, {0, 1, 2}, per_batch, {0, 2, 3}, {0, 1, 3});
            }),
            0);
  // Permuted batch and group order that cannot fold: copied, still right.
  const Tensor p = random({3, 4, 5, 6}).permute({2, 0, 3, 1});  // (5 3 6 4)
  check_contract(p, {0, 1, 2, 3}, random({3, 6, 7}), {1, 2, 4}, {1, 0, 3, 4});
}

TEST(BlasContract, InterleavedOutputIsAPermutedView) {
  // out (i k j): m = {i, j}, n = {k}; i and j are not adjacent, so the result is a view.
  const Tensor a = random({4, 5, 6}), b = random({6, 3});
  const int64_t before = contract_stats().permuted_outputs;
  const Tensor c = check_contract(a, {0, 2, 1}, b, {1, 3}, {0, 3, 2});
  EXPECT_EQ(contract_stats().permuted_outputs, before + 1);
  EXPECT_FALSE(c.is_contiguous());
}

TEST(BlasContract, ZeroSizes) {
  EXPECT_EQ(check_contract(random({0, 4}), {0, 1}, random({4, 3}), {1, 2}, {0, 2}).numel(), 0);
  // k = 0: an empty sum is zero.
  const Tensor z = check_contract(random({3, 0}), {0, 1}, random({0, 2}), {1, 2}, {0, 2});
  for (double v : z.to_vector<double>())
    EXPECT_EQ(v, 0.0);
  EXPECT_EQ(
      check_contract(random({0, 2, 3}), {0, 1, 2}, random({0, 3, 4}), {0, 2, 3}, {0, 1, 3}).numel(),
      0);
}

TEST(BlasContract, Dtypes) {
  for (DType dtype : {DType::f64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor a = random({3, 33, 65}, dtype), b = random({3, 65, 17}, dtype);
    check_contract(a, {0, 1, 2}, b, {0, 2, 3}, {0, 1, 3});
    check_contract(a.transpose(1, 2), {0, 2, 1}, b, {0, 2, 3}, {0, 3, 1});
  }
}

TEST(BlasContract, Bf16GemmsTakeBf16OperandsAsTheyAre) {
  // bf16 operands are multiplied as they are, f32 accumulation, no f32 copies of them (as
  // tensors): by oneDNN's matmul where it has bf16 kernels for the CPU (bf16_gemm_available()),
  // else in blocks of f32 scratch (gemm.cpp). Checked against the float64 reference on a GEMM
  // split by rows over threads (odd rows), a transposed and a sliced operand (leading
  // dimension above the row), a batch with a broadcast operand (batch stride 0), many small
  // GEMMs, and k = 0; the transformer-sized one spans several blocks and depth panels.
  const Tensor a = random({301, 96}, DType::bf16), b = random({96, 130}, DType::bf16);
  EXPECT_EQ(copies_during([&] { check_contract(a, {0, 1}, b, {1, 2}, {0, 2}); }), 0);
  EXPECT_EQ(copies_during([&] {
              check_contract(a.transpose(0, 1).contiguous().transpose(0, 1), {0, 1}, b, {1, 2}, {0, 2});
            }),
            0);
  const Tensor wide = random({96, 200}, DType::bf16);
  EXPECT_EQ(copies_during([&] {
              check_contract(a, {0, 1}, wide.slice(1, 10, 140), {1, 2}, {0, 2});
            }),
            0);
  // A GEMM of a transformer's size, split over the threads: oneDNN's matmul keeps a scratchpad
  // per call here (its own is shared by every thread in Debian's build: concurrent tiles
  // wrote each other's, and bf16 training lost its determinism).
  check_contract(random({256, 768}, DType::bf16), {0, 1}, random({768, 1024}, DType::bf16),
                 {1, 2}, {0, 2});
  // One b for every batch entry: a (4, 33, 40) times b (40, 17), batch stride 0.
  const Tensor batched = random({4, 33, 40}, DType::bf16), shared = random({40, 17}, DType::bf16);
  check_contract(batched, {0, 1, 2}, shared.as_strided({4, 40, 17}, {0, 17, 1}, 0), {0, 2, 3},
                 {0, 1, 3});
  check_contract(random({64, 8, 8}, DType::bf16), {0, 1, 2}, random({64, 8, 8}, DType::bf16),
                 {0, 2, 3}, {0, 1, 3});
  const Tensor empty_k = contract(random({5, 0}, DType::bf16), {0, 1}, random({0, 3}, DType::bf16),
                                  {1, 2}, {0, 2});
  EXPECT_EQ(empty_k.to_vector<double>(), std::vector<double>(15, 0.0));
}

TEST(BlasContract, SixteenBitOperandsCanReturnTheirF32Sums) {
  // result = f32 (the fusion pass's widened weight gradients): the sums of the 16-bit
  // products, not rounded to 16 bits; a transposed operand and k = 0 too. Other result dtypes
  // are refused.
  for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor a = random({70, 96}, dtype), b = random({96, 33}, dtype);
    const Tensor want = contract(a.to(DType::f64), {0, 1}, b.to(DType::f64), {1, 2}, {0, 2});
    for (const Tensor& x : {a, a.transpose(0, 1).contiguous().transpose(0, 1)}) {
      const Tensor got = contract(x, {0, 1}, b, {1, 2}, {0, 2}, DType::f32);
      ASSERT_EQ(got.dtype(), DType::f32);
      const std::vector<double> g = got.to(DType::f64).to_vector<double>(),
                                w = want.to_vector<double>(),
                                w16 = want.to(dtype).to(DType::f64).to_vector<double>();
      int rounded_like_16_bits = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_NEAR(g[i], w[i], 1e-5 * (1 + std::abs(w[i]))) << i;
        rounded_like_16_bits += g[i] == w16[i];
      }
      EXPECT_LT(rounded_like_16_bits, static_cast<int>(w.size()) / 4);
    }
    EXPECT_EQ(contract(random({5, 0}, dtype), {0, 1}, random({0, 3}, dtype), {1, 2}, {0, 2},
                       DType::f32).dtype(), DType::f32);
    EXPECT_THROW(contract(a, {0, 1}, b, {1, 2}, {0, 2}, DType::f64), RuntimeError);
  }
  EXPECT_THROW(contract(random({4, 4}, DType::f32), {0, 1}, random({4, 4}, DType::f32), {1, 2},
                        {0, 2}, DType::bf16),
               RuntimeError);
}

// contract_into(): the result written into a slot of a larger tensor (a concat's buffer,
// exec/execute.cpp): by the GEMM itself when the slot folds into a matrix BLAS can write
// (rows at the buffer's stride, or columns: the transposed product), else computed and copied.
// Every case against the float64 reference, and the rest of the buffer left as it was.
TEST(BlasContract, IntoASlotOfALargerTensor) {
  const auto written_in_place = [] { return contract_stats().written_in_place; };
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    // A weight gradient xᵀ·dy of 5 × 4 into columns [4, 8) of a 5 × 12 buffer.
    const Tensor x = random({7, 5}, dtype), dy = random({7, 4}, dtype);
    const Reference want = reference(x, {0, 1}, dy, {0, 2}, {1, 2});
    const Tensor buffer = full({5, 12}, -3.0, dtype, cpu());
    const int64_t before = written_in_place();
    contract_into(buffer.slice(1, 4, 8), x, {0, 1}, dy, {0, 2}, {1, 2});
    EXPECT_EQ(written_in_place(), before + 1);
    const std::vector<double> got = buffer.to_vector<double>();
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < 12; ++c) {
        const double g = got[static_cast<size_t>(r * 12 + c)];
        if (c < 4 || c >= 8) {
          EXPECT_EQ(g, -3.0) << r << ", " << c;  // outside the slot: untouched
        } else {
          const auto i = static_cast<size_t>(r * 4 + c - 4);
          EXPECT_NEAR(g, want.value[i], 9 * unit_roundoff(dtype) * want.magnitude[i]);
        }
      }
    // The slot's rows as the product's columns (a permuted slot): the GEMM writes Cᵀ.
    const Tensor wide = full({4, 10}, -3.0, dtype, cpu());
    const int64_t before_t = written_in_place();
    contract_into(wide.slice(1, 3, 8).transpose(0, 1), x, {0, 1}, dy, {0, 2}, {1, 2});
    EXPECT_EQ(written_in_place(), before_t + 1);
    const Tensor slot = wide.slice(1, 3, 8).transpose(0, 1).contiguous();
    const std::vector<double> g = slot.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], want.value[i], 9 * unit_roundoff(dtype) * want.magnitude[i]) << i;
    EXPECT_EQ(wide.slice(1, 0, 3).to_vector<double>(), std::vector<double>(12, -3.0));
    // Every other column: no BLAS layout, so the result is computed and copied in.
    const Tensor strided = full({5, 8}, -3.0, dtype, cpu());
    const int64_t before_copy = written_in_place();
    contract_into(strided.slice(1, 0, 8, 2), x, {0, 1}, dy, {0, 2}, {1, 2});
    EXPECT_EQ(written_in_place(), before_copy);
    const std::vector<double> s = strided.slice(1, 0, 8, 2).contiguous().to_vector<double>();
    for (size_t i = 0; i < s.size(); ++i)
      EXPECT_NEAR(s[i], want.value[i], 9 * unit_roundoff(dtype) * want.magnitude[i]) << i;
    EXPECT_EQ(strided.slice(1, 1, 8, 2).to_vector<double>(), std::vector<double>(20, -3.0));
    // No terms: zeros in the slot.
    const Tensor empty_k = full({5, 6}, -3.0, dtype, cpu());
    contract_into(empty_k.slice(1, 1, 5), random({0, 5}, dtype), {0, 1}, random({0, 4}, dtype),
                  {0, 2}, {1, 2});
    EXPECT_EQ(empty_k.slice(1, 1, 5).to_vector<double>(), std::vector<double>(20, 0.0));
  }
  // 16-bit operands into an f32 slot: their f32 sums (the widened weight gradients).
  const Tensor a = random({9, 6}, DType::bf16), b = random({9, 3}, DType::bf16);
  const Tensor f32 = full({6, 7}, -3.0, DType::f32, cpu());
  contract_into(f32.slice(1, 2, 5), a, {0, 1}, b, {0, 2}, {1, 2});
  const std::vector<double> got = f32.slice(1, 2, 5).contiguous().to_vector<double>();
  const std::vector<double> want =
      contract(a.to(DType::f64), {0, 1}, b.to(DType::f64), {0, 2}, {1, 2}).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
  // Wrong shape or dtype: refused, nothing written.
  const Tensor small = full({5, 3}, -3.0, DType::f32, cpu());
  const Tensor x = random({7, 5}), dy = random({7, 4});
  EXPECT_THROW(contract_into(small, x, {0, 1}, dy, {0, 2}, {1, 2}), RuntimeError);
  EXPECT_THROW(contract_into(full({5, 4}, 0.0, DType::f64, cpu()), x, {0, 1}, dy, {0, 2}, {1, 2}),
               RuntimeError);
  EXPECT_EQ(small.to_vector<double>(), std::vector<double>(15, -3.0));
}

TEST(BlasContract, Bf16RowStridedOperandsGetTheFastKernel) {
  // oneDNN 2.6 runs a bf16 GEMM whose A or B has rows apart (a slice of the fused q|k|v
  // projection) on its slower gemm:jit kernels; gemm.cpp copies such an operand dense when that
  // gives the AVX512_BF16/AMX brgemm kernel a dense one gets. So does a row tile of a
  // transposed A (a weight gradient's Xᵀ·dY split over threads): its band of the stored
  // k × m is copied dense, never transposed. Checked: the kernel names, and the results
  // against the float64 reference, split over threads.
  if (!bf16_gemm_available()) GTEST_SKIP() << "no bf16 GEMM here (oneDNN not built in)";
  GemmBatch dense;
  dense.dtype = DType::bf16;
  dense.m = 512, dense.n = 768, dense.k = 1024;
  dense.lda = dense.k, dense.ldb = dense.n, dense.ldc = dense.n;
  const std::string fast = bf16_gemm_kernel(dense);
  if (fast.rfind("brg", 0) != 0)
    GTEST_SKIP() << "this CPU's bf16 GEMM kernel is " << fast << ": no brgemm kernel to reach";
  GemmBatch strided = dense, strided_b = dense;
  strided.lda = dense.k + 512;
  strided_b.ldb = dense.n + 256;
  EXPECT_EQ(bf16_gemm_kernel(strided).rfind("brg", 0), 0u) << bf16_gemm_kernel(strided);
  EXPECT_EQ(bf16_gemm_kernel(strided_b).rfind("brg", 0), 0u) << bf16_gemm_kernel(strided_b);
  GemmBatch band = dense;  // half the columns of a stored 1024 × 1024 Aᵀ
  band.trans_a = true;
  band.lda = 2 * dense.m;
  EXPECT_EQ(bf16_gemm_kernel(band).rfind("brg", 0), 0u) << bf16_gemm_kernel(band);
  dense.bf16_c = true;  // a bf16 result: the same kernel
  EXPECT_EQ(bf16_gemm_kernel(dense), fast);

  // xᵀ·dy, A transposed, 2.4 MFLOP: split into row tiles whose Aᵀ rows are 96 apart.
  const Tensor x = random({200, 96}, DType::bf16), dy = random({200, 64}, DType::bf16);
  check_contract(x, {0, 1}, dy, {0, 2}, {1, 2});
  const Tensor qkv = random({300, 3 * 96}, DType::bf16), w = random({96, 130}, DType::bf16);
  check_contract(qkv.slice(1, 96, 192), {0, 1}, w, {1, 2}, {0, 2});  // rows 288 apart
  check_contract(random({77, 40}, DType::bf16).transpose(0, 1), {0, 1},
                 random({33, 100}, DType::bf16).slice(1, 10, 87), {2, 1}, {0, 2});
}

TEST(BlasContract, ManySmallAndOneLargeGemm) {
  // 256 GEMMs of 8×8×8 run across the batch; one 128×112×96 GEMM (2.75 MFLOP, above
  // gemm.cpp's 1 MFLOP threshold) is left to OpenBLAS's threads.
  check_contract(random({256, 8, 8}), {0, 1, 2}, random({256, 8, 8}), {0, 2, 3}, {0, 1, 3});
  const Tensor a = random({128, 112}, DType::f64), b = random({112, 96}, DType::f64);
  check_contract(a, {0, 1}, b, {1, 2}, {0, 2});
}

TEST(BlasContract, Errors) {
  const Tensor a = random({3, 4}), b = random({5, 6});
  EXPECT_THROW(contract(a, {0, 1}, b, {1, 2}, {0, 2}), RuntimeError);  // 4 vs 5
  EXPECT_THROW(contract(a, {0}, b, {1, 2}, {0, 2}), RuntimeError);     // dims
  EXPECT_THROW(contract(a, {0, 1}, b, {2, 3}, {0, 9}), RuntimeError);  // 9 nowhere
  EXPECT_THROW(contract(a, {0, 1}, b, {2, 3}, {0, 0}), RuntimeError);  // repeated
  EXPECT_THROW(contract(a, {0, 1}, b.to(DType::f64), {2, 3}, {0}), RuntimeError);
}

TEST(GemmBatched, BetaAccumulatesAndAlphaScales) {
  // C = 0.5·A·B + 2·C on a 2-batch, checked elementwise in double.
  const Tensor a = random({2, 3, 4}), b = random({2, 4, 5});
  Tensor c = random({2, 3, 5}).contiguous();
  const std::vector<double> c0 = c.to_vector<double>(), av = a.to_vector<double>(),
                            bv = b.to_vector<double>();
  GemmBatch g;
  g.batch = 2, g.m = 3, g.n = 5, g.k = 4;
  g.a = a.data_ptr(), g.lda = 4, g.stride_a = 12;
  g.b = b.data_ptr(), g.ldb = 5, g.stride_b = 20;
  g.c = c.data_ptr(), g.ldc = 5, g.stride_c = 15;
  g.alpha = 0.5, g.beta = 2;
  gemm_batched(g);
  const std::vector<double> got = c.to_vector<double>();
  for (int i = 0; i < 2; ++i) {
    for (int r = 0; r < 3; ++r) {
      for (int col = 0; col < 5; ++col) {
        double s = 0, mag = 0;
        for (int k = 0; k < 4; ++k) {
          const double p = av[i * 12 + r * 4 + k] * bv[i * 20 + k * 5 + col];
          s += p, mag += std::abs(p);
        }
        const double want = 0.5 * s + 2 * c0[i * 15 + r * 5 + col];
        EXPECT_NEAR(got[i * 15 + r * 5 + col], want, 8 * 0x1p-24 * (mag + 2 * std::abs(want)));
      }
    }
  }
  g.lda = 3;  // < k
  EXPECT_THROW(gemm_batched(g), RuntimeError);
}

/// Runs `body` under each f32 library choice, so that oneDNN's and OpenBLAS's paths are both
/// checked on any CPU (the automatic one sends a deep Aᵀ·B, k ≥ m, n, to OpenBLAS on AVX2-only
/// CPUs and everything to oneDNN on AVX-512 ones); the automatic choice is restored after.
template <class Body>
void for_each_f32_blas(Body body) {
  for (const auto& [choice, name] :
       {std::pair{F32Blas::automatic, "automatic"}, std::pair{F32Blas::onednn, "onednn"},
        std::pair{F32Blas::openblas, "openblas"}}) {
    choose_f32_blas(choice);
    SCOPED_TRACE(std::string("f32 BLAS choice ") + name);
    body();
  }
  choose_f32_blas(F32Blas::automatic);
}

// beta = 0 ignores C's old values, NaNs included (the BLAS rule), on the split and batched
// paths as on small GEMMs, on each f32 library.
void check_beta_zero_ignores_nans_in_c() {
  for (const auto& [batch, m] : {std::pair<int64_t, int64_t>{3, 8}, {3, 257}, {1, 257}, {1, 400}}) {
    const int64_t n = 96, k = 64;
    const bool ta = m == 400;  // a transposed A, C four times taller: oneDNN's run_transposed
    const Tensor a = random({batch, m, k}), b = random({batch, k, n});
    Tensor c = full({batch, m, n}, std::nan(""), DType::f32).contiguous();
    GemmBatch g;
    g.batch = batch, g.m = m, g.n = n, g.k = k;
    g.trans_a = ta;
    g.a = a.data_ptr(), g.lda = ta ? m : k, g.stride_a = m * k;
    g.b = b.data_ptr(), g.ldb = n, g.stride_b = k * n;
    g.c = c.data_ptr(), g.ldc = n, g.stride_c = m * n;
    gemm_batched(g);
    int64_t nans = 0;
    for (double v : c.to_vector<double>()) nans += std::isnan(v);
    EXPECT_EQ(nans, 0) << "batch " << batch << " m " << m;
  }
}

TEST(GemmBatched, BetaZeroIgnoresNaNsInC) {
  for_each_f32_blas(check_beta_zero_ignores_nans_in_c);
}

// Large f32 GEMMs (above 1 MFLOP) are split over threads by rows of C, or by columns when C
// is wider than tall; every combination of transposes, padded leading dimensions, batch
// strides and beta, with sizes that leave a ragged last block, against a float64 loop.
void check_large_gemms_split_over_threads() {
  struct Case {
    int64_t batch, m, n, k;
  };
  // 1 × 203 × 47 with a transposed A: on oneDNN, computed as Cᵀ and copied (run_transposed).
  // k the largest (a weight gradient over a batch's tokens) with a transposed A: OpenBLAS's
  // tiles where oneDNN has no AVX-512, split by rows, and over a batch.
  for (const Case& cs : {Case{1, 203, 57, 61}, Case{1, 45, 301, 77}, Case{3, 130, 129, 40},
                         Case{1, 203, 47, 61}, Case{1, 64, 48, 400}, Case{2, 40, 36, 380}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      // Stored shapes with 3 extra columns of padding (lda/ldb/ldc > the row length).
      const int64_t a_rows = ta ? cs.k : cs.m, a_cols = ta ? cs.m : cs.k;
      const int64_t b_rows = tb ? cs.n : cs.k, b_cols = tb ? cs.k : cs.n;
      const Tensor a = random({cs.batch, a_rows, a_cols + 3}), b = random({cs.batch, b_rows, b_cols + 3});
      Tensor c = random({cs.batch, cs.m, cs.n + 3}).contiguous();
      const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(),
                                c0 = c.to_vector<double>();
      GemmBatch g;
      g.batch = cs.batch, g.m = cs.m, g.n = cs.n, g.k = cs.k;
      g.trans_a = ta, g.trans_b = tb;
      g.a = a.data_ptr(), g.lda = a_cols + 3, g.stride_a = a_rows * (a_cols + 3);
      g.b = b.data_ptr(), g.ldb = b_cols + 3, g.stride_b = b_rows * (b_cols + 3);
      g.c = c.data_ptr(), g.ldc = cs.n + 3, g.stride_c = cs.m * (cs.n + 3);
      g.alpha = 1.5, g.beta = 0.5;
      gemm_batched(g);
      const std::vector<double> got = c.to_vector<double>();
      int64_t bad = 0;
      for (int64_t i = 0; i < cs.batch; ++i)
        for (int64_t r = 0; r < cs.m; ++r)
          for (int64_t col = 0; col < cs.n + 3; ++col) {
            const size_t at = static_cast<size_t>(i * g.stride_c + r * g.ldc + col);
            if (col >= cs.n) {  // padding: never written
              bad += got[at] != c0[at];
              continue;
            }
            double sum = 0, mag = 0;
            for (int64_t k = 0; k < cs.k; ++k) {
              const double x = av[static_cast<size_t>(i * g.stride_a + (ta ? k * g.lda + r : r * g.lda + k))];
              const double y = bv[static_cast<size_t>(i * g.stride_b + (tb ? col * g.ldb + k : k * g.ldb + col))];
              sum += x * y, mag += std::abs(x * y);
            }
            const double want = 1.5 * sum + 0.5 * c0[at];
            bad += std::abs(got[at] - want) > (cs.k + 4) * 0x1p-24 * (1.5 * mag + std::abs(want));
          }
      EXPECT_EQ(bad, 0) << "batch " << cs.batch << " m " << cs.m << " n " << cs.n << " k " << cs.k
                        << " trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST(GemmBatched, LargeGemmsSplitOverThreads) {
  for_each_f32_blas(check_large_gemms_split_over_threads);
}

}  // namespace
}  // namespace ein
