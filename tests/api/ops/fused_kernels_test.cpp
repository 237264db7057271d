// The fused kernel forms of Kernel IR (multi-output, row kernels with stages, row stores,
// index leaves, run-time params) and the fused ops built on them (fused_ops.h), each against a
// float64 oracle on fresh random inputs: contiguous, strided, transposed and broadcast
// (stride-0) layouts, zero-size batches and rows, and f32/f64/bf16.
//
// Tolerances: f64 kernels agree with the oracle to ~1e-12 (exp/log in libm, a few roundings per
// term); f32 kernels use polynomial exp/log within a few ulp and accumulate over the row in
// f32, so 2e-6 · sqrt(row) relative; bf16 outputs are rounded once to 8 bits (8e-3 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compiler/pipeline.h"
#include "exec/cpu_executor.h"
#include "exec/run_kernel.h"
#include "exec/fused_ops.h"
#include "compiler/kernel/kernel_ir.h"
#include "compiler/reference/kernel_eval.h"
#include "api/ops/ops_test_support.h"

namespace ein::testing {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16};

/// An input layout of the fused tests: how the rows of x sit in memory.
enum class RowLayout { contiguous, strided, transposed, broadcast };

const char* row_layout_name(RowLayout l) {
  switch (l) {
    case RowLayout::contiguous:
      return "contiguous";
    case RowLayout::strided:
      return "strided";
    case RowLayout::transposed:
      return "transposed";
    case RowLayout::broadcast:
      return "broadcast";
  }
  return "?";
}

constexpr RowLayout kLayouts[] = {RowLayout::contiguous, RowLayout::strided, RowLayout::transposed,
                                  RowLayout::broadcast};

/// A random (b, n) tensor of `dtype` in `layout`: strided takes every other element of each
/// row, transposed stores the rows column-major (row stride 1, element stride b), broadcast
/// repeats one random row b times (stride 0 along the batch).
Tensor random_rows(int64_t b, int64_t n, DType dtype, uint64_t seed, RowLayout layout,
                   double scale = 2) {
  auto values = [&](Shape shape) {
    Tensor r = randn(shape, DType::f64, cpu(), seed);
    std::vector<double> v = r.to_vector<double>();
    for (double& e : v)
      e *= scale;
    return on_test_device(from_data<double>(v, shape).to(dtype));
  };
  switch (layout) {
    case RowLayout::contiguous:
      return values({b, n});
    case RowLayout::strided:
      return values({b, 2 * n}).slice(1, 0, 2 * n, 2);
    case RowLayout::transposed:
      return values({n, b}).transpose(0, 1);
    case RowLayout::broadcast:
      return values({1, n}).expand({b, n});
  }
  return {};
}

/// The values of a (b, n) tensor, row-major.
std::vector<double> values_of(const Tensor& x) {
  return x.to_vector<double>();
}

Tolerance row_tolerance(DType dtype, int64_t n) {
  Tolerance t = tolerance_for(dtype, n);
  if (dtype == DType::f32) t = {t.rtol * 4, t.atol * 4};  // polynomial exp/log: a few ulp
  return t;
}

std::string context(const char* op, DType dtype, RowLayout layout, int64_t b, int64_t n) {
  return fmt::format("{} {} {} ({}, {})", op, dtype_name(dtype), row_layout_name(layout), b, n);
}

// ---- Kernel IR forms against evaluate() --------------------------------------------------

/// softmax (or log-softmax) of each row of a row-major (b, n) array, in double.
std::vector<double> softmax_ref(const std::vector<double>& x, int64_t b, int64_t n, bool log) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < b; ++i) {
    const double* row = x.data() + i * n;  // not &x[i * n]: x is empty when n is 0
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < n; ++j)
      m = std::max(m, row[j]);
    for (int64_t j = 0; j < n; ++j)
      s += std::exp(row[j] - m);
    for (int64_t j = 0; j < n; ++j)
      y[i * n + j] = log ? row[j] - m - std::log(s) : std::exp(row[j] - m) / s;
  }
  return y;
}

/// Elements buffer `b` of `k` spans from element 0 (strides are non-negative).
int64_t extent(const Kernel& k, int b) {
  int64_t e = 1;
  for (size_t d = 0; d < k.domain.size(); ++d)
    if (k.domain[d] > 0) e += (k.domain[d] - 1) * k.buffers[b].strides[d];
  return e;
}

/// Runs `k` through the CPU executor and through evaluate() on the same random buffers (inputs:
/// normal values rounded to their dtype, integers in [0, 6); outputs: a sentinel, so elements
/// a kernel must not touch are checked too) and compares every output buffer.
void check_against_evaluate(const Kernel& k, uint64_t seed, const std::string& what) {
  std::vector<Tensor> tensors;
  std::vector<std::vector<double>> data;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    const int64_t n = extent(k, static_cast<int>(b));
    Tensor t;
    if (buf.output) {
      t = full({n}, 12345, buf.dtype, cpu());
    } else if (buf.dtype == DType::i64 || buf.dtype == DType::i32) {
      std::vector<double> v = rand({n}, DType::f64, cpu(), seed + b).to_vector<double>();
      for (double& e : v)
        e = std::floor(e * 6);
      t = from_data<double>(v, {n}).to(buf.dtype);
    } else {
      t = randn({n}, DType::f64, cpu(), seed + b).to(buf.dtype);
    }
    tensors.push_back(t);
    data.push_back(t.to_vector<double>());
  }
  run_kernel(k, tensors);
  evaluate(k, data);
  int64_t row = 1;
  for (int d = k.parallel_dims(); d < static_cast<int>(k.domain.size()); ++d)
    row *= k.domain[d];
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    if (!k.buffers[b].output) continue;
    const int64_t n = static_cast<int64_t>(data[b].size());
    Tolerance tol = tolerance_for(k.compute == DType::f64 ? k.buffers[b].dtype : DType::f32, row);
    tol = {tol.rtol * 4, tol.atol * 4};  // f32 exp/log are polynomials within a few ulp
    if (k.buffers[b].dtype == DType::bf16) tol = tolerance_for(DType::bf16, row);
    expect_close(tensors[b], {{n}, data[b]}, tol,
                 fmt::format("{}: buffer {}\n{}", what, b, dump(k)));
  }
}

/// A pointwise kernel with three outputs of different dtypes and layouts, a broadcast input and
/// run-time params: y0 = a·p0 + b, y1 = exp(a) − b·p1 (f64 out), y2 = a·b (bf16 out).
Kernel three_outputs(const Shape& a_strides, const Shape& y_strides) {
  Kernel k;
  k.name = "three_outputs";
  k.domain = {5, 37};
  k.compute = DType::f32;
  const int a = k.load(k.add_buffer(DType::f32, a_strides));
  const int b = k.load(k.add_buffer(DType::f32, {0, 1}));  // one row, broadcast
  const int y0 = k.add_output(DType::f32, y_strides);
  const int y1 = k.add_output(DType::f64, {37, 1});
  const int y2 = k.add_output(DType::bf16, y_strides);
  k.store(y0, k.apply(ScalarOp::add, k.apply(ScalarOp::mul, a, k.param(0.75)), b));
  k.store(y1, k.apply(ScalarOp::sub, k.apply(ScalarOp::exp, a),
                      k.apply(ScalarOp::mul, b, k.param(-2.5))));
  k.store(y2, k.apply(ScalarOp::mul, a, b));
  return k;
}

TEST(FusedKernelIr, MultiOutputPointwise) {
  check_against_evaluate(three_outputs({37, 1}, {37, 1}), 1, "contiguous (vectorized)");
  check_against_evaluate(three_outputs({1, 5}, {1, 5}), 2, "transposed (scalar)");
  check_against_evaluate(three_outputs({74, 2}, {37, 1}), 3, "strided input");
}

/// y = x + 0.5 · i0 − 0.25 · i_last over `domain` (rank 2 or 3; the last dim is reduced when
/// `reduced`, with a row store of Σ (x · i_last) + i0): index leaves on vectorized and scalar
/// dims, in pointwise and row kernels.
Kernel index_kernel(Shape domain, int reduced, const Shape& x_strides, const Shape& y_strides,
                    const Shape& row_strides) {
  Kernel k;
  k.name = "index_kernel";
  k.domain = std::move(domain);
  k.reduced = reduced;
  const int last = static_cast<int>(k.domain.size()) - 1;
  const int x = k.load(k.add_buffer(DType::f32, x_strides));
  const int i0 = k.index(0), il = k.index(last);
  const int y = k.add_output(DType::f32, y_strides);
  k.store(y, k.apply(ScalarOp::sub,
                     k.apply(ScalarOp::add, x, k.apply(ScalarOp::mul, i0, k.constant(0.5))),
                     k.apply(ScalarOp::mul, il, k.constant(0.25))));
  if (reduced > 0) {
    const int s = k.reduce(Combine::sum, k.apply(ScalarOp::mul, x, il));
    k.store(k.add_output(DType::f32, row_strides), k.apply(ScalarOp::add, s, i0));
  }
  return k;
}

TEST(FusedKernelIr, IndexLeavesOnEveryKindOfDim) {
  check_against_evaluate(index_kernel({3, 37}, 0, {37, 1}, {37, 1}, {}), 30,
                         "pointwise, vectorized");
  check_against_evaluate(index_kernel({3, 37}, 0, {1, 3}, {1, 3}, {}), 31, "pointwise, scalar");
  check_against_evaluate(index_kernel({4, 37, 5}, 0, {185, 5, 1}, {185, 5, 1}, {}), 32,
                         "pointwise, rank 3");
  check_against_evaluate(index_kernel({35, 6}, 1, {1, 35}, {1, 35}, {1, 0}), 33,
                         "mode B (index of the vectorized parallel dim)");
  check_against_evaluate(index_kernel({5, 70}, 1, {70, 1}, {70, 1}, {1, 0}), 34,
                         "mode A (index of the vectorized row dim)");
}

/// Cross-entropy-like row kernel over x (p r) with every leaf kind: stages max, Σ exp, and Σ of
/// the target's logit (index leaf == a per-row integer load); a full store y = softmax · w, and
/// two row stores (the loss, and max · param).
Kernel row_kernel(Shape domain, int reduced, const Shape& x_strides, const Shape& y_strides,
                  const Shape& w_strides, const Shape& t_strides, const Shape& row_out_strides,
                  DType compute = DType::f32) {
  Kernel k;
  k.name = "row_kernel";
  k.domain = std::move(domain);
  k.reduced = reduced;
  k.compute = compute;
  const int x = k.load(k.add_buffer(compute, x_strides));
  const int w = k.load(k.add_buffer(DType::f32, w_strides));
  const int t = k.load(k.add_buffer(DType::i64, t_strides));
  const int y = k.add_output(compute, y_strides);
  const int loss = k.add_output(DType::f32, row_out_strides);
  const int scaled = k.add_output(compute, row_out_strides);
  const int m = k.reduce(Combine::max, x);
  const int e = k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, x, m));
  const int s = k.reduce(Combine::sum, e);
  const int hit = k.apply(ScalarOp::eq, k.index(static_cast<int>(k.domain.size()) - 1), t);
  const int xt = k.reduce(Combine::sum, k.apply(ScalarOp::where, hit, x, k.constant(0)));
  k.store(y, k.apply(ScalarOp::mul, k.apply(ScalarOp::div, e, s), w));
  k.store(loss, k.apply(ScalarOp::sub, k.apply(ScalarOp::add, k.apply(ScalarOp::log, s), m), xt));
  k.store(scaled, k.apply(ScalarOp::mul, m, k.param(3)));
  return k;
}

TEST(FusedKernelIr, RowKernelsInEverySchedule) {
  for (DType compute : {DType::f32, DType::f64}) {
    // Mode A: rows contiguous (vectors along the row, four accumulators per stage).
    check_against_evaluate(
        row_kernel({9, 70}, 1, {70, 1}, {70, 1}, {0, 1}, {1, 0}, {1, 0}, compute), 10, "mode A");
    // Mode B: rows along the outer dim, points contiguous (vectors across rows).
    check_against_evaluate(
        row_kernel({35, 6}, 1, {1, 35}, {1, 35}, {0, 1}, {1, 0}, {1, 0}, compute), 11, "mode B");
    // Scalar: strided rows, a strided output.
    check_against_evaluate(
        row_kernel({7, 13}, 1, {30, 2}, {13, 1}, {0, 3}, {2, 0}, {2, 0}, compute), 12, "scalar");
    // A row of size 1, and a single row.
    check_against_evaluate(row_kernel({8, 1}, 1, {1, 1}, {1, 1}, {0, 0}, {1, 0}, {1, 0}, compute),
                           13, "rows of one");
    check_against_evaluate(row_kernel({40}, 1, {1}, {1}, {1}, {0}, {0}, compute), 14, "one row");
  }
  // Two reduced dims that do not merge (the class dim is indexed), batch dims that do.
  check_against_evaluate(row_kernel({2, 3, 4, 5}, 2, {60, 20, 1, 4}, {60, 20, 5, 1}, {0, 0, 1, 4},
                                    {3, 1, 0, 0}, {3, 1, 0, 0}),
                         15, "two row dims");
}

TEST(FusedKernelIr, ZeroSizeRowsStoreTheIdentities) {
  // An empty row: the full store writes nothing, the row stores see max = −inf and Σ = 0.
  check_against_evaluate(row_kernel({4, 0}, 1, {0, 1}, {0, 1}, {0, 1}, {1, 0}, {1, 0}), 20,
                         "empty rows");
  check_against_evaluate(row_kernel({0, 6}, 1, {6, 1}, {6, 1}, {0, 1}, {1, 0}, {1, 0}), 21,
                         "no rows");
}

/// Per row r: l = log Σ exp(x[r, :]); a row store of l, and total stores of l over the rows
/// (each combine in `totals`).
Kernel totals_kernel(const Shape& domain, const Shape& x_strides, std::vector<Combine> totals) {
  Kernel k;
  k.name = "totals";
  k.domain = domain;
  k.reduced = 1;
  const int x = k.load(k.add_buffer(DType::f32, x_strides));
  const int l = k.apply(ScalarOp::log, k.reduce(Combine::sum, k.apply(ScalarOp::exp, x)));
  k.store(k.add_output(DType::f32, {1, 0}), l);
  for (Combine c : totals) {
    k.store(k.add_output(DType::f32, {0, 0}), k.apply(ScalarOp::mul, l, k.constant(0.25)));
    k.stores.back().total = c;
  }
  return k;
}

TEST(FusedKernelIr, TotalStoresCombineRowValuesOverAllRows) {
  for (const Shape& strides : {Shape{70, 1}, Shape{1, 9}})
    check_against_evaluate(
        totals_kernel({9, 70}, strides, {Combine::sum, Combine::max, Combine::min, Combine::prod}),
        30, "totals");
  check_against_evaluate(totals_kernel({1000, 3}, {3, 1}, {Combine::sum}), 31, "many rows");
  check_against_evaluate(totals_kernel({0, 6}, {6, 1}, {Combine::sum, Combine::prod}), 32,
                         "no rows: the identities");
  // One launch: the rows' values are combined on the host, not by a second kernel.
  const Kernel k = totals_kernel({64, 128}, {128, 1}, {Combine::sum});
  std::vector<Tensor> b = {randn({64 * 128}, DType::f32, cpu(), 33), empty({64}), empty({1})};
  run_kernel(k, b);
  const int64_t before = kernel_launches();
  run_kernel(k, b);
  EXPECT_EQ(kernel_launches() - before, 1);
  // verify() refuses a total store that varies along the row or has a stride.
  Kernel bad = totals_kernel({4, 5}, {5, 1}, {Combine::sum});
  bad.buffers.back().strides = {1, 0};
  EXPECT_THROW(verify(bad), std::logic_error);
}

TEST(FusedKernelIr, CoalesceKeepsTheRowBoundaryAndIndexedDims) {
  Kernel k = row_kernel({2, 3, 4, 5}, 2, {60, 20, 5, 1}, {60, 20, 5, 1}, {0, 0, 5, 1}, {3, 1, 0, 0},
                        {3, 1, 0, 0});
  Kernel c = coalesce(k);
  // P (2 3) merges into 6; R (4 5) does not, because the class dim (5) is indexed.
  EXPECT_EQ(c.domain, (Shape{6, 4, 5}));
  EXPECT_EQ(c.reduced, 2);
  // Without the index leaf's dim inside R, R merges, but never with P.
  Kernel plain;
  plain.domain = {2, 3, 4};
  plain.reduced = 1;
  const int x = plain.load(plain.add_buffer(DType::f32, {12, 4, 1}));
  plain.store(plain.add_output(DType::f32, {12, 4, 1}),
              plain.apply(ScalarOp::sub, x, plain.reduce(Combine::max, x)));
  Kernel pc = coalesce(plain);
  EXPECT_EQ(pc.domain, (Shape{6, 4}));
  EXPECT_EQ(pc.reduced, 1);
  EXPECT_NO_THROW(verify(pc));
}

/// softmax over the last dim of x (a b c), built as fused_ops.cpp builds it.
Kernel softmax_kernel(Shape domain, Shape x_strides, Shape y_strides) {
  Kernel k;
  k.name = "softmax";
  k.domain = std::move(domain);
  k.reduced = 1;
  const int x = k.load(k.add_buffer(DType::f32, std::move(x_strides)));
  const int m = k.reduce(Combine::max, x);
  const int e = k.apply(ScalarOp::exp, k.apply(ScalarOp::sub, x, m));
  const int s = k.reduce(Combine::sum, e);
  k.store(k.add_output(DType::f32, std::move(y_strides)),
          k.apply(ScalarOp::mul, e, k.apply(ScalarOp::reciprocal, s)));
  return k;
}

TEST(FusedKernelIr, GoldenDumpOfTheGeneralForm) {
  Kernel k = softmax_kernel({2, 3, 8}, {24, 8, 1}, {24, 8, 1});
  k.param(0.5);
  EXPECT_EQ(dump(coalesce(k)),
            "kernel softmax domain=[6,8] reduced=1 compute=f32 params=1\n"
            "  buf0 in f32 strides=[8,1]\n"
            "  buf1 out f32 strides=[8,1]\n"
            "  %0 = load buf0\n"
            "  %1 = acc stage0\n"
            "  %2 = - %0 %1\n"
            "  %3 = exp %2\n"
            "  %4 = acc stage1\n"
            "  %5 = reciprocal %4\n"
            "  %6 = * %3 %5\n"
            "  %7 = param p0\n"
            "  stage0 = max %0\n"
            "  stage1 = sum %3\n"
            "  store buf1 %6\n");
}

TEST(FusedKernelIr, TheMlirDependsOnTheStridePatternNotOnSizesOrParamValues) {
  Kernel small = softmax_kernel({2, 3, 8}, {24, 8, 1}, {24, 8, 1});
  Kernel large = softmax_kernel({7, 50, 96}, {4800, 96, 1}, {4800, 96, 1});
  small.store(small.add_output(DType::f32, {3, 1, 0}),
              small.apply(ScalarOp::mul, small.accumulator(1), small.param(0.25)));
  large.store(large.add_output(DType::f32, {50, 1, 0}),
              large.apply(ScalarOp::mul, large.accumulator(1), large.param(-7)));
  const std::string a = emit_kernel(small, Target::mlir), b = emit_kernel(large, Target::mlir);
  EXPECT_EQ(a, b);
  // Mode A: each stage keeps four vector accumulators; the full store is vectorized too.
  EXPECT_NE(a.find("<maximumf>"), std::string::npos) << a;
  EXPECT_NE(a.find(":4 = scf.for"), std::string::npos) << a;
  EXPECT_NE(a.find("vector.store"), std::string::npos) << a;
  // The param is read from the launch's f64 array, not baked in.
  EXPECT_NE(a.find("memref<?xf64>"), std::string::npos) << a;
}

TEST(FusedKernelIr, StashedStageValuesInEverySchedule) {
  // softmax's exp(x − max) is written to y by the last stage and read back by the store loop
  // (emit_mlir_loops.cpp, plan_stash); the same in modes A and B, scalar code, and in place.
  check_against_evaluate(softmax_kernel({9, 70}, {70, 1}, {70, 1}), 40, "stash, mode A");
  check_against_evaluate(softmax_kernel({35, 6}, {1, 35}, {1, 35}), 41, "stash, mode B");
  check_against_evaluate(softmax_kernel({7, 13}, {26, 2}, {13, 1}), 42, "stash, scalar");
  for (auto [b, n] : {std::pair<int64_t, int64_t>{9, 70}, {6, 35}}) {
    const bool rows_contiguous = n == 70;
    Tensor x = rows_contiguous ? randn({b, n}, DType::f32, cpu(), 43)
                               : randn({n, b}, DType::f32, cpu(), 43).transpose(0, 1);
    const std::vector<double> want = softmax_ref(x.to_vector<double>(), b, n, false);
    const Kernel k = softmax_kernel({b, n}, x.strides(), x.strides());
    const Tensor buffers[] = {x, x};
    run_kernel(k, buffers);  // in place: y is x
    expect_close(x, {{b, n}, want}, row_tolerance(DType::f32, n),
                 rows_contiguous ? "in-place softmax, mode A" : "in-place softmax, mode B");
  }
}

/// GELU's backward with its bias gradient, as the fused training step builds it, over x (p r):
/// y = tanh(x) · g and h = x / 2 + tanh(x) stored over the row, and the row sum of y, which
/// no store reads back: emit_mlir_loops.cpp's single pass (stages and stores in one loop).
Kernel map_and_sum_kernel(Shape domain, const Shape& x_strides, const Shape& y_strides) {
  Kernel k;
  k.name = "map_and_sum";
  k.domain = std::move(domain);
  k.reduced = 1;
  const int x = k.load(k.add_buffer(DType::f32, x_strides));
  const int g = k.load(k.add_buffer(DType::f32, x_strides));
  const int t = k.apply(ScalarOp::tanh, x);
  const int y = k.apply(ScalarOp::mul, t, g);
  k.store(k.add_output(DType::f32, y_strides), y);
  k.store(k.add_output(DType::f32, y_strides),
          k.apply(ScalarOp::add, k.apply(ScalarOp::mul, x, k.constant(0.5)), t));
  const int s = k.reduce(Combine::sum, y);
  k.store(k.add_output(DType::f32, {1, 0}), k.apply(ScalarOp::mul, s, k.constant(2)));
  return k;
}

TEST(FusedKernelIr, MapsThatAlsoReduceTakeOnePassOverTheRow) {
  // Mode B with 150 points per row: groups of four vectors, one vector, a scalar tail.
  check_against_evaluate(map_and_sum_kernel({150, 37}, {1, 150}, {1, 150}), 50,
                         "single pass, mode B");
  check_against_evaluate(map_and_sum_kernel({9, 37}, {2, 18}, {37, 1}), 51,
                         "single pass, scalar");
  check_against_evaluate(map_and_sum_kernel({9, 70}, {70, 1}, {70, 1}), 52, "mode A (two passes)");
  check_against_evaluate(map_and_sum_kernel({150, 0}, {1, 150}, {1, 150}), 53,
                         "single pass, empty rows");
  // One tanh per loop that walks the row (groups of four vectors, one vector, scalar): the
  // stored y and the summed y are one value, and no second pass recomputes it.
  const std::string mlir = emit_kernel(map_and_sum_kernel({150, 37}, {1, 150}, {1, 150}),
                                       Target::mlir);
  size_t tanhs = 0;
  for (size_t at = mlir.find("math.tanh"); at != std::string::npos;
       at = mlir.find("math.tanh", at + 1))
    ++tanhs;
  EXPECT_EQ(tanhs, 3u) << mlir;
  EXPECT_NE(mlir.find("vector<64xf32>"), std::string::npos) << mlir;
  // In place, g's memory receives y (same strides): each point reads g before storing y there.
  const int64_t p = 150, r = 37;
  Tensor x = randn({r, p}, DType::f32, cpu(), 54), g = randn({r, p}, DType::f32, cpu(), 55);
  const std::vector<double> xs = x.to_vector<double>(), gs = g.to_vector<double>();
  std::vector<double> want_y(xs.size()), want_s(p, 0);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < p; ++j) {
      want_y[i * p + j] = std::tanh(xs[i * p + j]) * gs[i * p + j];
      want_s[j] += 2 * want_y[i * p + j];
    }
  Tensor h = empty({r, p}), s = empty({p});
  const Tensor buffers[] = {x, g, g, h, s};
  run_kernel(map_and_sum_kernel({p, r}, {1, p}, {1, p}), buffers);
  expect_close(g, {{r, p}, want_y}, row_tolerance(DType::f32, 1), "in-place y");
  expect_close(s, {{p}, want_s}, row_tolerance(DType::f32, r), "column sums of in-place y");
}

TEST(FusedKernelIr, VerifyRejectsBrokenGeneralKernels) {
  auto base = [] {
    Kernel k;
    k.name = "broken";
    k.domain = {4, 8};
    k.reduced = 1;
    const int x = k.load(k.add_buffer(DType::f32, {8, 1}));
    k.add_output(DType::f32, {1, 0});
    return std::pair<Kernel, int>{k, x};
  };
  {  // a row store that reads a value varying along the row
    auto [k, x] = base();
    k.reduce(Combine::sum, x);
    k.store(1, x);
    EXPECT_THROW(verify(k), std::logic_error);
  }
  {  // a stage that reads its own result
    auto [k, x] = base();
    const int a = k.accumulator(0);
    k.stages.push_back({Combine::sum, k.apply(ScalarOp::add, x, a)});
    k.store(1, a);
    EXPECT_THROW(verify(k), std::logic_error);
  }
  {  // an output stored twice, and an input after an output
    auto [k, x] = base();
    const int s = k.reduce(Combine::sum, x);
    k.store(1, s);
    k.store(1, s);
    EXPECT_THROW(verify(k), std::logic_error);
    k.stores.pop_back();
    EXPECT_NO_THROW(verify(k));
    k.add_buffer(DType::f32, {8, 1});
    EXPECT_THROW(verify(k), std::logic_error);
  }
  {  // a param slot and a dim that do not exist
    auto [k, x] = base();
    const int p = k.param(1);
    k.store(1, k.apply(ScalarOp::add, k.reduce(Combine::sum, x), p));
    EXPECT_NO_THROW(verify(k));
    k.nodes[p].param = 7;
    EXPECT_THROW(verify(k), std::logic_error);
    k.nodes[p].param = 0;
    k.index(5);
    EXPECT_THROW(verify(k), std::logic_error);
  }
}

// ---- the oracle of each fused op, in double, row by row ----------------------------------

TEST(FusedOps, SoftmaxAndLogSoftmax) {
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : {std::pair<int64_t, int64_t>{7, 100}, {33, 17}, {4, 1}, {0, 5}, {3, 0}}) {
        const Tensor x = random_rows(b, n, dtype, 11 + b + n, layout);
        const std::vector<double> xv = values_of(x);
        const Tensor y = softmax_rows(x);
        EXPECT_EQ(y.dtype(), dtype);
        expect_close(y, {{b, n}, softmax_ref(xv, b, n, false)}, row_tolerance(dtype, n),
                     context("softmax", dtype, layout, b, n));
        expect_close(log_softmax_rows(x), {{b, n}, softmax_ref(xv, b, n, true)},
                     row_tolerance(dtype, n), context("log_softmax", dtype, layout, b, n));
      }
}

/// Rows of a (b, n) f64 vector: the mean and biased variance of row i.
std::pair<double, double> moments(const std::vector<double>& x, int64_t i, int64_t n) {
  double mean = 0, var = 0;
  for (int64_t j = 0; j < n; ++j)
    mean += x[i * n + j];
  mean /= static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j)
    var += (x[i * n + j] - mean) * (x[i * n + j] - mean);
  return {mean, var / static_cast<double>(n)};
}

constexpr std::pair<int64_t, int64_t> kShapes[] = {{7, 100}, {33, 17}, {4, 1}, {0, 5}, {3, 0}};

TEST(FusedOps, LayerNormWithWeightAndBias) {
  const double eps = 1e-5;
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : kShapes) {
        if (n == 0) continue;  // torch rejects normalizing over zero elements too
        const Tensor x = random_rows(b, n, dtype, 31 + n, layout);
        const Tensor w = random_rows(1, n, dtype, 32, RowLayout::strided).select(0, 0);
        const Tensor bias = random_rows(1, n, dtype, 33, RowLayout::contiguous).select(0, 0);
        const std::vector<double> xv = values_of(x), wv = values_of(w), bv = values_of(bias);
        std::vector<double> y(xv.size()), mean(b), rstd(b);
        for (int64_t i = 0; i < b; ++i) {
          auto [mu, var] = moments(xv, i, n);
          mean[i] = mu;
          rstd[i] = 1 / std::sqrt(var + eps);
          for (int64_t j = 0; j < n; ++j)
            y[i * n + j] = (xv[i * n + j] - mu) * rstd[i] * wv[j] + bv[j];
        }
        const LayerNormResult r = layer_norm_rows(x, w, bias, eps);
        const std::string what = context("layer_norm", dtype, layout, b, n);
        expect_close(r.y, {{b, n}, y}, row_tolerance(dtype, n), what);
        const Tolerance stats = row_tolerance(dtype == DType::f64 ? DType::f64 : DType::f32, n);
        expect_close(r.mean, {{b}, mean}, stats, what + " mean");
        expect_close(r.rstd, {{b}, rstd}, stats, what + " rstd");
        // Without weight and bias.
        std::vector<double> plain(xv.size());
        for (int64_t i = 0; i < b; ++i)
          for (int64_t j = 0; j < n; ++j)
            plain[i * n + j] = (xv[i * n + j] - mean[i]) * rstd[i];
        expect_close(layer_norm_rows(x, {}, {}, eps).y, {{b, n}, plain}, row_tolerance(dtype, n),
                     what + " no affine");
      }
}

TEST(FusedOps, RmsNorm) {
  const double eps = 1e-6;
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : kShapes) {
        if (n == 0) continue;
        const Tensor x = random_rows(b, n, dtype, 41 + n, layout);
        const Tensor w = random_rows(1, n, dtype, 42, RowLayout::contiguous).select(0, 0);
        const std::vector<double> xv = values_of(x), wv = values_of(w);
        std::vector<double> y(xv.size()), rstd(b);
        for (int64_t i = 0; i < b; ++i) {
          double ms = 0;
          for (int64_t j = 0; j < n; ++j)
            ms += xv[i * n + j] * xv[i * n + j];
          rstd[i] = 1 / std::sqrt(ms / static_cast<double>(n) + eps);
          for (int64_t j = 0; j < n; ++j)
            y[i * n + j] = xv[i * n + j] * rstd[i] * wv[j];
        }
        const RmsNormResult r = rms_norm_rows(x, w, eps);
        const std::string what = context("rms_norm", dtype, layout, b, n);
        expect_close(r.y, {{b, n}, y}, row_tolerance(dtype, n), what);
        expect_close(r.rstd, {{b}, rstd},
                     row_tolerance(dtype == DType::f64 ? DType::f64 : DType::f32, n), what);
      }
}

TEST(FusedOps, CrossEntropyFromLogitsWithIntegerTargets) {
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : kShapes) {
        if (n == 0) continue;
        const Tensor x = random_rows(b, n, dtype, 51 + n, layout, 3);
        std::vector<int64_t> targets(b);
        const std::vector<double> u = rand({b}, DType::f64, cpu(), 52 + b).to_vector<double>();
        for (int64_t i = 0; i < b; ++i)
          targets[i] = static_cast<int64_t>(u[i] * n);
        if (b > 2) targets[1] = -100;  // ignored
        const Tensor t = on_test_device(from_data<int64_t>(targets, {b}));
        const std::vector<double> xv = values_of(x);
        const std::vector<double> logp = softmax_ref(xv, b, n, true);
        const std::vector<double> p = softmax_ref(xv, b, n, false);
        std::vector<double> loss(b), dx(xv.size());
        // The gradient of the mean loss over b rows: a stride-0 per-row grad of 1/b.
        const double g = b > 0 ? 1.0 / static_cast<double>(b) : 0;
        for (int64_t i = 0; i < b; ++i) {
          const bool ignored = targets[i] == -100;
          loss[i] = ignored ? 0 : -logp[i * n + targets[i]];
          for (int64_t j = 0; j < n; ++j)
            dx[i * n + j] = ignored ? 0 : (p[i * n + j] - (j == targets[i] ? 1 : 0)) * g;
        }
        const std::string what = context("cross_entropy", dtype, layout, b, n);
        expect_close(cross_entropy_rows(x, t), {{b}, loss}, row_tolerance(dtype, n), what);
        const Tensor grad = full({1}, g, dtype, device_under_test()).expand({b});
        expect_close(cross_entropy_rows_backward(x, t, grad), {{b, n}, dx}, row_tolerance(dtype, n),
                     what + " backward");
        // i32 targets read the same.
        expect_close(cross_entropy_rows(x, t.to(DType::i32)), {{b}, loss}, row_tolerance(dtype, n),
                     what + " i32 targets");
      }
}

TEST(FusedOps, SoftmaxBackward) {
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : kShapes) {
        const Tensor y = softmax_rows(random_rows(b, n, dtype, 61 + n, RowLayout::contiguous));
        const Tensor yl =
            layout == RowLayout::transposed ? y.transpose(0, 1).contiguous().transpose(0, 1) : y;
        const Tensor g = random_rows(b, n, dtype, 62 + n, layout);
        const std::vector<double> yv = values_of(y), gv = values_of(g);
        std::vector<double> dx(yv.size());
        for (int64_t i = 0; i < b; ++i) {
          double dot = 0;
          for (int64_t j = 0; j < n; ++j)
            dot += gv[i * n + j] * yv[i * n + j];
          for (int64_t j = 0; j < n; ++j)
            dx[i * n + j] = yv[i * n + j] * (gv[i * n + j] - dot);
        }
        expect_close(softmax_rows_backward(yl, g), {{b, n}, dx}, row_tolerance(dtype, n),
                     context("softmax_backward", dtype, layout, b, n));
      }
}

TEST(FusedOps, LayerNormBackwardRowPart) {
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : kShapes) {
        if (n == 0) continue;
        const Tensor x = random_rows(b, n, dtype, 71 + n, layout);
        const Tensor w = random_rows(1, n, dtype, 72, RowLayout::contiguous).select(0, 0);
        const Tensor g = random_rows(b, n, dtype, 73 + n, RowLayout::contiguous);
        const LayerNormResult fwd = layer_norm_rows(x, w, {}, 1e-5);
        const std::vector<double> xv = values_of(x), wv = values_of(w), gv = values_of(g);
        const std::vector<double> mv = values_of(fwd.mean), rv = values_of(fwd.rstd);
        std::vector<double> dx(xv.size());
        for (int64_t i = 0; i < b; ++i) {
          double a = 0, c = 0;
          for (int64_t j = 0; j < n; ++j) {
            const double xhat = (xv[i * n + j] - mv[i]) * rv[i];
            a += gv[i * n + j] * wv[j];
            c += gv[i * n + j] * wv[j] * xhat;
          }
          a /= static_cast<double>(n);
          c /= static_cast<double>(n);
          for (int64_t j = 0; j < n; ++j) {
            const double xhat = (xv[i * n + j] - mv[i]) * rv[i];
            dx[i * n + j] = rv[i] * (gv[i * n + j] * wv[j] - a - xhat * c);
          }
        }
        // The row part's terms cancel (Σ dx = 0), so errors are relative to |g|·rstd, not |dx|.
        Tolerance tol = row_tolerance(dtype, n);
        tol.atol *= 8;
        const std::string what = context("layer_norm_backward", dtype, layout, b, n);
        expect_close(layer_norm_rows_backward(g, x, w, fwd.mean, fwd.rstd), {{b, n}, dx}, tol,
                     context("layer_norm_backward", dtype, layout, b, n));
        // The column part: dweight = Σ_rows g · x̂, dbias = Σ_rows g (one kernel).
        std::vector<double> dw(n, 0), db(n, 0);
        for (int64_t i = 0; i < b; ++i)
          for (int64_t j = 0; j < n; ++j) {
            dw[j] += gv[i * n + j] * (xv[i * n + j] - mv[i]) * rv[i];
            db[j] += gv[i * n + j];
          }
        const NormWeightGrads wg = layer_norm_weight_grads(g, x, fwd.mean, fwd.rstd);
        expect_close(wg.dweight, {{n}, dw}, row_tolerance(dtype, b), what + " dweight");
        expect_close(wg.dbias, {{n}, db}, row_tolerance(dtype, b), what + " dbias");
      }
}

TEST(FusedOps, RmsNormBackward) {
  for (DType dtype : kDTypes)
    for (RowLayout layout : kLayouts)
      for (auto [b, n] : kShapes) {
        if (n == 0) continue;
        const Tensor x = random_rows(b, n, dtype, 91 + n, layout);
        const Tensor w = random_rows(1, n, dtype, 92, RowLayout::contiguous).select(0, 0);
        const Tensor g = random_rows(b, n, dtype, 93 + n, RowLayout::transposed);
        const RmsNormResult fwd = rms_norm_rows(x, w, 1e-6);
        const std::vector<double> xv = values_of(x), wv = values_of(w), gv = values_of(g);
        const std::vector<double> rv = values_of(fwd.rstd);
        std::vector<double> dx(xv.size()), dw(n, 0);
        for (int64_t i = 0; i < b; ++i) {
          double c = 0;
          for (int64_t j = 0; j < n; ++j)
            c += gv[i * n + j] * wv[j] * xv[i * n + j] * rv[i];
          c /= static_cast<double>(n);
          for (int64_t j = 0; j < n; ++j) {
            const double xhat = xv[i * n + j] * rv[i];
            dx[i * n + j] = rv[i] * (gv[i * n + j] * wv[j] - xhat * c);
            dw[j] += gv[i * n + j] * xhat;
          }
        }
        Tolerance tol = row_tolerance(dtype, n);
        tol.atol *= 8;  // the terms cancel, as in LayerNorm's backward
        const std::string what = context("rms_norm_backward", dtype, layout, b, n);
        expect_close(rms_norm_rows_backward(g, x, w, fwd.rstd), {{b, n}, dx}, tol, what);
        expect_close(rms_norm_weight_grad(g, x, fwd.rstd), {{n}, dw}, row_tolerance(dtype, b),
                     what + " dweight");
      }
  // One row (a rank-1 input): the column kernel reduces over a dim of size 1.
  const Tensor x = randn({9}, DType::f32, cpu(), 94), g = randn({9}, DType::f32, cpu(), 95);
  const RmsNormResult fwd = rms_norm_rows(x, {}, 1e-6);
  const std::vector<double> xv = values_of(x), gv = values_of(g);
  const double r = values_of(fwd.rstd)[0];
  std::vector<double> dw(9);
  for (int j = 0; j < 9; ++j)
    dw[j] = gv[j] * xv[j] * r;
  expect_close(rms_norm_weight_grad(g, x, fwd.rstd), {{9}, dw}, row_tolerance(DType::f32, 1),
               "rms_norm_weight_grad of one row");
}

TEST(FusedOps, AdamWUpdatesInPlaceInOnePass) {
  const AdamWConfig config{1e-2, 0.9, 0.999, 1e-8, 0.1};
  for (DType dtype : kDTypes)
    for (RowLayout layout : {RowLayout::contiguous, RowLayout::strided, RowLayout::transposed})
      for (auto [b, n] : {std::pair<int64_t, int64_t>{13, 37}, {1, 1}, {0, 3}}) {
        Tensor param = random_rows(b, n, dtype, 81 + n, layout);
        Tensor m = random_rows(b, n, dtype, 82, layout, 0.1);
        Tensor v = random_rows(b, n, dtype, 83, RowLayout::contiguous, 0.1);
        v = v.to(DType::f64);
        {  // the second moment is non-negative
          std::vector<double> sq = v.to_vector<double>();
          for (double& e : sq)
            e = e * e;
          v = tensor_of(
              sq, {b, n}, dtype,
              layout == RowLayout::transposed ? Layout::column_major : Layout::contiguous);
        }
        std::vector<double> p = values_of(param), mv = values_of(m), vv = values_of(v);
        int64_t update_launches = 0;  // reading values back may copy on a device: not counted
        for (int64_t step = 1; step <= 3; ++step) {
          const Tensor g = random_rows(b, n, dtype, 84 + step, RowLayout::contiguous);
          const std::vector<double> gv = values_of(g);
          const double bias1 = 1 - std::pow(config.beta1, step);
          const double bias2 = 1 - std::pow(config.beta2, step);
          for (size_t i = 0; i < p.size(); ++i) {
            p[i] *= 1 - config.lr * config.weight_decay;
            mv[i] = config.beta1 * mv[i] + (1 - config.beta1) * gv[i];
            vv[i] = config.beta2 * vv[i] + (1 - config.beta2) * gv[i] * gv[i];
            p[i] -= config.lr / bias1 * mv[i] / (std::sqrt(vv[i]) / std::sqrt(bias2) + config.eps);
          }
          const int64_t before = kernel_launches();
          adamw_update(param, g, m, v, config, step);
          update_launches += kernel_launches() - before;
          const std::string what =
              fmt::format("{} step {}", context("adamw", dtype, layout, b, n), step);
          // bf16 state is rounded every step; compare with the oracle fed the rounded state.
          const Tolerance tol =
              dtype == DType::bf16 ? Tolerance{2e-2, 2e-2} : row_tolerance(dtype, 8);
          expect_close(param, {{b, n}, p}, tol, what + " param");
          expect_close(m, {{b, n}, mv}, tol, what + " exp_avg");
          expect_close(v, {{b, n}, vv}, tol, what + " exp_avg_sq");
          p = values_of(param);
          mv = values_of(m);
          vv = values_of(v);
        }
        if (b > 1) {
          EXPECT_THROW(
              adamw_update(param.select(0, 0).unsqueeze(0).expand({b, n}), param, m, v, config, 4),
              RuntimeError);
        }
        if (b * n > 0) {
          EXPECT_EQ(update_launches, 3) << "one kernel per step";
        }
      }
}

// scale_in_place (gradient clipping, loss-scale unscaling): x · factor computed in the compute
// type and rounded to x's dtype, in one launch, into x itself: contiguous, strided (the gaps
// untouched) and transposed views, zero size, the special values, and a broadcast view refused.
TEST(FusedOps, ScaleInPlaceIsOneLaunchIntoTheTensor) {
  const double factor = 0.3712;
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -3e-39, 3.4e38, 1.0};
  for (DType dtype : kDTypes)
    for (RowLayout layout : {RowLayout::contiguous, RowLayout::strided, RowLayout::transposed})
      for (auto [b, n] : {std::pair<int64_t, int64_t>{13, 37}, {0, 3}}) {
        Tensor x = random_rows(b, n, dtype, 91 + n, layout);
        std::vector<double> v = values_of(x);
        for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i) v[i] = specials[i];
        x.copy_(on_test_device(from_data<double>(v, {b, n}).to(dtype)));
        v = values_of(x);  // as x's dtype holds them
        std::vector<double> want;
        for (double e : v) {
          const double product = dtype == DType::f64
                                     ? e * factor
                                     : static_cast<double>(static_cast<float>(e) *
                                                           static_cast<float>(factor));
          want.push_back(product);
        }
        const Tensor expected = from_data<double>(want, {b, n}).to(dtype).to(DType::f64);
        const int64_t before = kernel_launches();
        scale_in_place(x, factor);
        if (b * n > 0) {
          EXPECT_EQ(kernel_launches() - before, 1);
        }
        const std::vector<double> got = values_of(x), exp = expected.to_vector<double>();
        ASSERT_EQ(got.size(), exp.size());
        for (size_t i = 0; i < got.size(); ++i) {
          const bool same = (std::isnan(got[i]) && std::isnan(exp[i])) ||
                            (got[i] == exp[i] && std::signbit(got[i]) == std::signbit(exp[i]));
          EXPECT_TRUE(same) << context("scale_in_place", dtype, layout, b, n) << " element " << i
                            << ": " << got[i] << " want " << exp[i];
        }
      }
  // The gaps of a strided view keep their values.
  Tensor wide = randn({4, 10}, DType::f32, cpu(), 95);
  const std::vector<double> before = wide.to_vector<double>();
  scale_in_place(wide.slice(1, 0, 10, 2), 2.0);
  const std::vector<double> after = wide.to_vector<double>();
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i], i % 2 == 0 ? before[i] * 2 : before[i]) << "element " << i;
  EXPECT_THROW(scale_in_place(randn({1, 5}, DType::f32, cpu(), 96).expand({3, 5}), 2.0),
               RuntimeError);
}

}  // namespace
}  // namespace ein::testing
