// The fused ops built on the fused Kernel IR forms (exec/fused_ops.h): softmax, LayerNorm,
// RMSNorm, cross-entropy and their backwards, the AdamW update and in-place scaling, each
// against a float64 oracle row by row on fresh random inputs in every row layout
// (fused_test_support.h), zero-size batches and rows, and f32/f64/bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "api/ops/fused_test_support.h"
#include "exec/fused_ops.h"

namespace ein::testing {
namespace {

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

// row_sum_of_squares (gradient norms): Σ x² per row in one launch (two for a few long
// non-contiguous rows on CUDA), squares and sums in the compute type, totals as f64, against float64 sums of
// the compute type's squares: every dtype and layout, empty rows (0) and no rows, and rows
// holding ±0, ±inf (inf), NaN (NaN), subnormals (their f32 squares are 0) and 3.4e38 (its f32
// square overflows to inf).
TEST(FusedOps, RowSumOfSquaresIsOneLaunchPerTensor) {
  const double specials[] = {0.0, -0.0, 1e-40, -3e-39, 1.0};
  for (DType dtype : kDTypes)
    for (RowLayout layout : {RowLayout::contiguous, RowLayout::strided, RowLayout::transposed})
      for (auto [b, n] : {std::pair<int64_t, int64_t>{13, 37}, {5, 1000}, {0, 3}, {4, 0}}) {
        Tensor x = random_rows(b, n, dtype, 71 + n, layout);
        std::vector<double> v = values_of(x);
        if (n >= 8 && b >= 4) {
          for (size_t i = 0; i < std::size(specials); ++i) v[i] = specials[i];  // row 0
          v[n] = INFINITY;                                                     // row 1
          v[2 * n + 1] = NAN;                                                  // row 2
          v[3 * n + 2] = dtype == DType::f64 ? 1e300 : 3.4e38;                 // row 3
        }
        x.copy_(on_test_device(from_data<double>(v, {b, n}).to(dtype)));
        v = values_of(x);  // as x's dtype holds them
        const int64_t before = kernel_launches();
        const Tensor sums = row_sum_of_squares(x);
        // On CUDA, five 1000-long rows that are not contiguous (strided or transposed) are a
        // column reduction: two kernels whose threads share the rows (split_rows.h).
        const bool split = x.device().kind == DeviceKind::cuda &&
                           layout != RowLayout::contiguous && n == 1000;
        if (b > 0) {
          EXPECT_EQ(kernel_launches() - before, split ? 2 : 1);
        }
        ASSERT_EQ(sums.shape(), Shape{b});
        ASSERT_EQ(sums.dtype(), DType::f64);
        const std::vector<double> got = sums.to_vector<double>();
        for (int64_t r = 0; r < b; ++r) {
          double want = 0, magnitude = 0;
          for (int64_t c = 0; c < n; ++c) {
            const double e = v[r * n + c];
            const double sq = dtype == DType::f64 ? e * e
                                                  : static_cast<double>(static_cast<float>(e) *
                                                                        static_cast<float>(e));
            want += sq;
            magnitude += std::abs(sq);
          }
          const double tol = (dtype == DType::f64 ? 1e-13 : 2e-6) * magnitude;
          const bool same = (std::isnan(got[r]) && std::isnan(want)) || got[r] == want ||
                            (std::isfinite(want) && std::abs(got[r] - want) <= tol);
          EXPECT_TRUE(same) << context("row_sum_of_squares", dtype, layout, b, n) << " row " << r
                            << ": " << got[r] << " want " << want;
        }
      }
  EXPECT_EQ(row_sum_of_squares(full({}, -3.0, DType::f32)).to_vector<double>(),
            std::vector<double>{9.0});
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
