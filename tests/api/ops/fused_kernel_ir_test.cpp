// The fused kernel forms of Kernel IR (multi-output, row kernels with stages, row stores,
// index leaves, run-time params), each run through the CPU executor against evaluate(), the
// float64 Kernel IR interpreter, on fresh random buffers: contiguous, strided, transposed and
// broadcast (stride-0) layouts, zero-size batches and rows, and f32/f64/bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <tbb/global_control.h>

#include "api/ops/fused_test_support.h"
#include "compiler/emit/emit_mlir.h"
#include "compiler/kernel/kernel_ir.h"
#include "compiler/kernel/prepare.h"
#include "compiler/kernel/split_rows.h"
#include "compiler/pipeline.h"
#include "compiler/reference/kernel_eval.h"
#include "exec/cpu_executor.h"
#include "exec/run_kernel.h"

namespace ein::testing {
namespace {

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
  const Kernel panels = index_kernel({2100, 6}, 1, {1, 2100}, {1, 2100}, {1, 0});
  EXPECT_GT(schedule_cpu(panels, 2).panel, 0);  // rows 8400 bytes apart
  check_against_evaluate(panels, 35, "mode B in panels (index of the vectorized parallel dim)");
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

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
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
  EXPECT_EQ(occurrences(mlir, "math.tanh"), 3u) << mlir;
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

/// Two parallel dims (o p) and two reduced ones (r q), in f64: stored y = x·g − x, and per
/// point the sum and the max of y over the row (two stages).
Kernel two_stage_columns(int64_t o, int64_t p, int64_t r, int64_t q) {
  Kernel k;
  k.name = "two_stage_columns";
  k.domain = {o, p, r, q};
  k.reduced = 2;
  k.compute = DType::f64;
  const Shape in{p * r * q, 1, p, p * r};  // rows (r q) of p contiguous points, q outermost
  const int x = k.load(k.add_buffer(DType::f64, in));
  const int g = k.load(k.add_buffer(DType::f32, in));
  const int y = k.apply(ScalarOp::sub, k.apply(ScalarOp::mul, x, g), x);
  k.store(k.add_output(DType::f64, in), y);
  const int sum = k.reduce(Combine::sum, y);
  const int max = k.reduce(Combine::max, y);
  k.store(k.add_output(DType::f64, {p, 1, 0, 0}), k.apply(ScalarOp::add, sum, max));
  k.store(k.add_output(DType::f32, {p, 1, 0, 0}), max);
  return k;
}

TEST(FusedKernelIr, ColumnSumsOverFarApartRowsRunInPanels) {
  // Rows 8 KB or more apart: a panel per thread, at most 8 KB of each row a panel. 5000
  // f32 points are three panels on one or two threads (2048, 2048, 904), on four 1264-point
  // ones. Rows 4 KB apart keep the register strips.
  const Kernel wide = map_and_sum_kernel({5000, 300}, {1, 5000}, {1, 5000});
  EXPECT_EQ(schedule_cpu(wide, 1).panel, 2048);
  EXPECT_EQ(schedule_cpu(wide, 1).chunk, 2048);
  EXPECT_EQ(schedule_cpu(wide, 2).chunk, 2048);
  EXPECT_EQ(schedule_cpu(wide, 4).chunk, 1264);
  EXPECT_EQ(schedule_cpu(wide, 4).outer_iterations, 4);
  EXPECT_EQ(schedule_cpu(map_and_sum_kernel({1024, 300}, {1, 1024}, {1, 1024}), 2).panel, 0);
  check_against_evaluate(wide, 60, "panels of 2048 points");
  // One tanh per loop over the panel's points (vectors, then a scalar tail); the sums in a
  // stack array of 2048 f64 (f32 sums accumulate in f64).
  const std::string mlir = emit_kernel(wide, Target::mlir);
  EXPECT_EQ(occurrences(mlir, "math.tanh"), 2u) << mlir;
  EXPECT_NE(mlir.find("memref.alloca() : memref<2048xf64>"), std::string::npos) << mlir;
  // Two stages, two reduced dims, an outer parallel dim, f64 (1024-element arrays), odd sizes:
  // the last panel of each o ends in a scalar tail.
  const Kernel two = two_stage_columns(3, 75, 14, 9);
  EXPECT_EQ(schedule_cpu(two, 1).panel, 1024);
  EXPECT_EQ(schedule_cpu(two, 2).chunk, 40);
  check_against_evaluate(two, 61, "two stages over (r q), f64");
  // Rows that also read a stage's result need two passes: no panels.
  EXPECT_EQ(schedule_cpu(softmax_kernel({5000, 30}, {1, 5000}, {1, 5000}), 2).panel, 0);
}

TEST(FusedKernelIr, ColumnSumsInRowBlocks) {
  // One parallel dim of at most 4096 points and one reduced dim: blocks of whole rows, at
  // least 64K elements each and at most 32 of them, whatever the thread count. 300 points
  // (vectors and a scalar tail) over 1000 rows: ⌈65536 / 300⌉ = 219 rows, rounded up to
  // whole runs of 64 (the f32 sums go into f64 ones every 64 rows): blocks of 256, the last
  // one 232.
  const Kernel k = map_and_sum_kernel({300, 1000}, {1, 300}, {1, 300});
  for (int threads : {1, 2, 4}) {
    const CpuSchedule s = schedule_cpu(k, threads);
    EXPECT_EQ(s.row_block, 256);
    EXPECT_EQ(s.panel, 0);
    EXPECT_EQ(s.outer_iterations, 4);
    EXPECT_EQ(scratch_elements(k, s), 4 * 300);
  }
  check_against_evaluate(k, 70, "row blocks: 300 points, 1000 rows");
  // Rows 8 KB apart with at most 4096 points: row blocks rather than panels; 100 rows are
  // four blocks of 32, 32, 32 and 4 (at most 32 blocks, so at least ⌈100 / 32⌉ rows each).
  const Kernel pitched = map_and_sum_kernel({2100, 100}, {1, 2100}, {1, 2100});
  EXPECT_EQ(schedule_cpu(pitched, 2).row_block, 32);
  EXPECT_EQ(schedule_cpu(pitched, 2).outer_iterations, 4);
  check_against_evaluate(pitched, 71, "row blocks: 2100 points, 100 rows");
  // f64, two stages (sum and max) and a row store reading both; rank 2 once the size-1 dims
  // are dropped: blocks of 874 rows.
  const Kernel two = prepare_kernel(to_general_form(two_stage_columns(1, 75, 4000, 1)));
  EXPECT_EQ(schedule_cpu(two, 2).row_block, 874);
  check_against_evaluate(two, 72, "row blocks: two stages, f64");
  check_against_evaluate(index_kernel({300, 1000}, 1, {1, 300}, {1, 300}, {1, 0}), 73,
                         "row blocks: index leaves of both dims");
  // Fewer rows than two blocks, or more points than 4096: the other schedules.
  EXPECT_EQ(schedule_cpu(map_and_sum_kernel({300, 400}, {1, 300}, {1, 300}), 2).row_block, 0);
  EXPECT_EQ(schedule_cpu(map_and_sum_kernel({5000, 300}, {1, 5000}, {1, 5000}), 2).row_block, 0);
  // At most 128 KB of sums on the stack (f64 for an f32 kernel): four stages over 4096
  // points, not five.
  auto powers = [](int stages) {
    Kernel m;
    m.name = "power_sums";
    m.domain = {4096, 200};
    m.reduced = 1;
    int x = m.load(m.add_buffer(DType::f32, {1, 4096}));
    m.store(m.add_output(DType::f32, {1, 4096}), x);
    for (int s = 0, power = x; s < stages; ++s, power = m.apply(ScalarOp::mul, power, x))
      m.store(m.add_output(DType::f32, {1, 0}), m.reduce(Combine::sum, power));
    return m;
  };
  EXPECT_EQ(schedule_cpu(powers(4), 2).row_block, 16);
  EXPECT_EQ(schedule_cpu(powers(5), 2).row_block, 0);
  check_against_evaluate(powers(4), 76, "row blocks: four stages over 4096 points");
  // Stack arrays sized at run time, one tanh per loop over a row's points (vectors, then a
  // scalar tail): the combining iteration reads only the sums.
  const std::string mlir = emit_kernel(k, Target::mlir);
  EXPECT_NE(mlir.find("memref.alloca(%"), std::string::npos) << mlir;
  EXPECT_EQ(occurrences(mlir, "math.tanh"), 2u) << mlir;

  // The same bits on one thread as on two, NaN and inf included: the blocks' sums are
  // combined in block order. Column 7 has a NaN in block 2, column 8 an inf in block 4.
  const int64_t p = 300, r = 1000;
  std::vector<float> xs = randn({r, p}, DType::f32, cpu(), 74).to_vector<float>();
  xs[500 * p + 7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> gs = randn({r, p}, DType::f32, cpu(), 75).to_vector<float>();
  gs[900 * p + 8] = std::numeric_limits<float>::infinity();
  xs[900 * p + 8] = 1;
  const Tensor x = from_data<float>(xs, {r, p}), g = from_data<float>(gs, {r, p});
  auto sums = [&] {
    Tensor y = empty({r, p}), h = empty({r, p}), s = empty({p});
    const Tensor buffers[] = {x, g, y, h, s};
    run_kernel(k, buffers);
    return s.to_vector<float>();
  };
  const std::vector<float> two_threads = sums();
  std::vector<float> one_thread;
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    one_thread = sums();
  }
  ASSERT_EQ(two_threads.size(), static_cast<size_t>(p));
  EXPECT_TRUE(std::isnan(two_threads[7]));
  EXPECT_EQ(two_threads[8], std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < p; ++j) {
    if (j == 7) continue;
    EXPECT_EQ(two_threads[j], one_thread[j]) << j;
    double want = 0;
    for (int64_t i = 0; i < r; ++i)
      want += 2 * std::tanh(static_cast<double>(xs[i * p + j])) * gs[i * p + j];
    if (j != 8) {
      EXPECT_NEAR(two_threads[j], want, 1e-4 * (1 + std::abs(want))) << j;
    }
  }
}

/// Column sums with a full store, a per-point input and a run-time param over (p r): y = x · w
/// stored, and per point Σ x², max x and a row store Σ x² · w + max x · param.
Kernel weighted_columns(int64_t p, int64_t r) {
  Kernel k;
  k.name = "weighted_columns";
  k.domain = {p, r};
  k.reduced = 1;
  const int x = k.load(k.add_buffer(DType::f32, {1, p}));
  const int w = k.load(k.add_buffer(DType::f32, {1, 0}));
  k.store(k.add_output(DType::f32, {1, p}), k.apply(ScalarOp::mul, x, w));
  const int squares = k.reduce(Combine::sum, k.apply(ScalarOp::mul, x, x));
  const int top = k.reduce(Combine::max, x);
  k.store(k.add_output(DType::f32, {1, 0}),
          k.apply(ScalarOp::add, k.apply(ScalarOp::mul, squares, w),
                  k.apply(ScalarOp::mul, top, k.param(0.5))));
  return k;
}

/// Runs `k` and its split into `chunks` (both on the CPU) on the same random inputs and
/// compares every output; the split against evaluate() on the original too.
void check_split(const Kernel& k, int64_t chunks, uint64_t seed, const std::string& what) {
  const Kernel prepared = prepare_kernel(to_general_form(k));
  const std::optional<RowSplit> split = split_rows(prepared, chunks);
  ASSERT_TRUE(split.has_value()) << what;
  std::vector<Tensor> whole, parts;
  std::vector<std::vector<double>> data;
  for (size_t b = 0; b < prepared.buffers.size(); ++b) {
    const KernelBuffer& buf = prepared.buffers[b];
    const int64_t n = extent(prepared, static_cast<int>(b));
    const Tensor t = buf.output ? full({n}, 12345, buf.dtype, cpu())
                                : randn({n}, DType::f64, cpu(), seed + b).to(buf.dtype);
    whole.push_back(t);
    parts.push_back(t.clone());
    data.push_back(t.to_vector<double>());
  }
  run_kernel(prepared, whole);
  evaluate(prepared, data);
  std::vector<Tensor> scratch;
  for (size_t s = 0; s < prepared.stages.size(); ++s)
    scratch.push_back(empty(split->scratch_shape, prepared.compute, cpu()));
  auto bind = [&](const std::vector<int>& which) {
    std::vector<Tensor> bound;
    for (int w : which) bound.push_back(w >= 0 ? parts[w] : scratch[-1 - w]);
    return bound;
  };
  run_kernel(split->partial, bind(split->partial_buffers));
  run_kernel(split->combine, bind(split->combine_buffers));
  const int64_t rows = prepared.domain.back();
  for (size_t b = 0; b < prepared.buffers.size(); ++b) {
    if (!prepared.buffers[b].output) continue;
    const int64_t n = static_cast<int64_t>(data[b].size());
    const Tolerance tol = tolerance_for(
        prepared.compute == DType::f64 ? prepared.buffers[b].dtype : DType::f32, rows);
    expect_close(parts[b], {{n}, whole[b].to_vector<double>()}, tol,
                 fmt::format("{}: buffer {}, split against whole", what, b));
    expect_close(parts[b], {{n}, data[b]}, tol,
                 fmt::format("{}: buffer {}, split against the float64 semantics", what, b));
  }
}

TEST(FusedKernelIr, LongF32SumsAccumulateInF64InEverySchedule) {
  // Sums of many f32 values of 0.1 (whose roundings all lean one way). Accumulated in f32
  // they came out 8e-6 (panels: 800 terms a point) to 1e-2 (scalar: 10^6 terms in one chain)
  // off, 4.7e-4 in mode A (64 lanes of ~47,000 terms each). Accumulated in f64, from f32
  // partials of at most 16 terms a lane (mode A) or 64 rows (the others), each is within 1e-6
  // (PyTorch's sum of 10^7 such values: 4.5e-7).
  struct Case {
    const char* what;
    Kernel k;
    bool (*schedule_is)(const CpuSchedule&);
  };
  const int64_t big = 3'000'001;
  Case cases[] = {
      {"mode A", long_sum_kernel({2, big}, {big, 1}, {1, 0}, false),
       [](const CpuSchedule& s) { return s.vector_dim == 1; }},
      {"mode B strips", long_sum_kernel({40, 100'000}, {1, 40}, {1, 0}, false),
       [](const CpuSchedule& s) { return s.vector_dim == 0 && s.panel == 0 && s.row_block == 0; }},
      {"scalar", long_sum_kernel({3, 1'000'000}, {1, 3}, {2, 0}, false),
       [](const CpuSchedule& s) { return s.vector_dim == -1; }},
      {"row blocks", long_sum_kernel({16, 250'000}, {1, 16}, {1, 0}, true),
       [](const CpuSchedule& s) { return s.row_block > 0; }},
      {"panels", long_sum_kernel({5000, 800}, {1, 5000}, {1, 0}, true),
       [](const CpuSchedule& s) { return s.panel > 0; }},
  };
  for (Case& c : cases) {
    const std::string name = c.what;
    EXPECT_TRUE(c.schedule_is(schedule_cpu(c.k, 2))) << name << ": not the schedule meant";
    std::vector<Tensor> tensors;
    for (size_t b = 0; b < c.k.buffers.size(); ++b)
      tensors.push_back(full({extent(c.k, static_cast<int>(b))}, b == 0 ? 0.1 : 0.0, DType::f32,
                             cpu()));
    run_kernel(c.k, tensors);
    const double exact = static_cast<double>(0.1f) * static_cast<double>(c.k.domain[1]);
    const std::vector<double> out = tensors.back().to_vector<double>();
    const int64_t stride = c.k.buffers.back().strides[0];
    for (int64_t p = 0; p < c.k.domain[0]; ++p) {
      const double got = out[static_cast<size_t>(p * stride)];
      EXPECT_NEAR(got, exact, 1e-6 * exact) << name << ", point " << p;
    }
  }
}

TEST(FusedKernelIr, ColumnReductionsSplitAcrossRows) {
  // How many chunks a GPU run takes: threads for (chunk, point) pairs up to 64K, chunks of at
  // least 32 rows, a divisor of the rows; none when the points alone are 32K or more, when a
  // full buffer walks the rows contiguously (the row strategies), or for under 256 rows.
  auto chunks = [](const Kernel& k) { return gpu_row_chunks(prepare_kernel(to_general_form(k))); };
  EXPECT_EQ(chunks(map_and_sum_kernel({512, 2048}, {1, 512}, {1, 512})), 64);
  EXPECT_EQ(chunks(map_and_sum_kernel({300, 1000}, {1, 300}, {1, 300})), 25);
  EXPECT_EQ(chunks(map_and_sum_kernel({40000, 512}, {1, 40000}, {1, 40000})), 1);
  EXPECT_EQ(chunks(map_and_sum_kernel({9, 700}, {700, 1}, {700, 1})), 1);
  EXPECT_EQ(chunks(map_and_sum_kernel({300, 255}, {1, 300}, {1, 300})), 1);
  EXPECT_EQ(chunks(map_and_sum_kernel({300, 997}, {1, 300}, {1, 300})), 1);  // a prime
  // What the CUDA executor and `ein emit --target cuda` run: that split, or none.
  const std::optional<RowSplit> gpu =
      split_for_gpu(map_and_sum_kernel({512, 2048}, {1, 512}, {1, 512}));
  ASSERT_TRUE(gpu.has_value());
  EXPECT_EQ(gpu->chunks, 64);
  EXPECT_FALSE(split_for_gpu(map_and_sum_kernel({9, 700}, {700, 1}, {700, 1})).has_value());

  check_split(map_and_sum_kernel({300, 1000}, {1, 300}, {1, 300}), 50, 80,
              "map and column sum, 50 chunks of 20 rows");
  check_split(weighted_columns(77, 96), 6, 81, "two stages, a per-point input, a param");
  check_split(two_stage_columns(1, 75, 400, 1), 8, 82, "f64, sum and max");
  const std::optional<RowSplit> split = split_rows(
      prepare_kernel(to_general_form(weighted_columns(77, 96))), 6);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->partial.domain, (Shape{6, 77, 16}));
  EXPECT_EQ(split->combine.domain, (Shape{77, 6}));
  EXPECT_EQ(split->scratch_shape, (Shape{6, 77}));
  EXPECT_EQ(split->partial_buffers, (std::vector<int>{0, 1, 2, -1, -2}));
  EXPECT_EQ(split->combine_buffers, (std::vector<int>{-1, -2, 1, 3}));

  // Not split: a stage or full store reading a stage (softmax), an index leaf, chunks that do
  // not divide the rows.
  auto prepared = [](const Kernel& k) { return prepare_kernel(to_general_form(k)); };
  EXPECT_FALSE(split_rows(prepared(softmax_kernel({300, 64}, {1, 300}, {1, 300})), 4));
  EXPECT_FALSE(split_rows(prepared(index_kernel({300, 64}, 1, {1, 300}, {1, 300}, {1, 0})), 4));
  EXPECT_FALSE(split_rows(prepared(weighted_columns(77, 96)), 5));
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

}  // namespace
}  // namespace ein::testing
