// The fused attention's test cases (tests/exec/attention_test.cpp, attention_cuda_test.cpp):
// the float64 definition (softmax(scale q kᵀ + bias) v and its gradients), random operands and
// masks, and run_case / grouped_query_heads, which run the kernels of a device against it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <fmt/format.h>

#include "exec/amx_tiles.h"
#include "exec/attention.h"
#include "exec/attention_cuda.h"

namespace ein::attention_testing {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Row-major [n, rows, cols] doubles.
struct Mat {
  int64_t n = 0, rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int64_t b, int64_t i, int64_t j) { return v[(b * rows + i) * cols + j]; }
  double at(int64_t b, int64_t i, int64_t j) const { return v[(b * rows + i) * cols + j]; }
};

inline Mat random_mat(int64_t n, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<double> d;
  Mat m{n, rows, cols, std::vector<double>(n * rows * cols)};
  for (double& x : m.v) x = d(rng);
  return m;
}

inline Tensor tensor_of(const Mat& m, DType dtype) {
  return from_data(m.v, {m.n, m.rows, m.cols}).to(dtype);
}

inline Mat mat_of(const Tensor& t) {
  const Shape& s = t.shape();
  Mat m{s[0], s[1], s[2], t.to(DType::f64).contiguous().to_vector<double>()};
  return m;
}

/// The definition in float64: o [n, t, f], lse [n, t], and the gradients for cotangent d_o.
/// With each output, the sum of its terms' magnitudes (o: Σ p|v|, dq: Σ |dS||k|, ...), where
/// dS's magnitude also counts |dO|·|v| (what rounding dO changes): what rounding each term's
/// factors to bf16 can change the output by, at most 2⁻⁸ of it per rounding.
struct Reference {
  Mat o, dq, dk, dv;
  Mat o_abs, dq_abs, dk_abs, dv_abs;
  std::vector<double> lse;
};

inline Reference reference(const Mat& q, const Mat& k, const Mat& v, const Mat* bias, double scale,
                    const Mat& d_o) {
  const int64_t n = q.n, t = q.rows, e = q.cols, s = k.rows, f = v.cols;
  Reference r;
  r.o = {n, t, f, std::vector<double>(n * t * f)};
  r.dq = {n, t, e, std::vector<double>(n * t * e)};
  r.dk = {n, s, e, std::vector<double>(n * s * e)};
  r.dv = {n, s, f, std::vector<double>(n * s * f)};
  r.o_abs = r.o, r.dq_abs = r.dq, r.dk_abs = r.dk, r.dv_abs = r.dv;
  r.lse.assign(n * t, -kInf);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> logit(s), p(s, 0.0);
      double mx = -kInf;
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < e; ++c) dot += q.at(b, i, c) * k.at(b, j, c);
        const double bb = bias ? bias->at(b, i, j) : 0;
        logit[j] = std::isinf(bb) && bb < 0 ? bb : scale * dot + bb;
        mx = std::max(mx, logit[j]);
      }
      if (std::isinf(mx)) continue;  // a fully masked row: o = 0, lse = -inf, no gradient
      double sum = 0;
      for (int64_t j = 0; j < s; ++j) sum += (p[j] = std::exp(logit[j] - mx));
      for (int64_t j = 0; j < s; ++j) p[j] /= sum;
      r.lse[b * t + i] = mx + std::log(sum);
      for (int64_t c = 0; c < f; ++c) {
        double acc = 0, mag = 0;
        for (int64_t j = 0; j < s; ++j) {
          acc += p[j] * v.at(b, j, c);
          mag += p[j] * std::abs(v.at(b, j, c));
        }
        r.o.at(b, i, c) = acc;
        r.o_abs.at(b, i, c) = mag;
      }
      // dP_j = dO · v_j;  dS_j = p_j (dP_j − Σ_k p_k dP_k);  dlogit = dS, d(scores) = scale·dS.
      std::vector<double> dp(s), dp_abs(s);
      double mean = 0;
      for (int64_t j = 0; j < s; ++j) {
        double acc = 0, mag = 0;
        for (int64_t c = 0; c < f; ++c) {
          acc += d_o.at(b, i, c) * v.at(b, j, c);
          mag += std::abs(d_o.at(b, i, c) * v.at(b, j, c));
        }
        dp[j] = acc;
        dp_abs[j] = mag;
        mean += p[j] * acc;
      }
      for (int64_t j = 0; j < s; ++j) {
        const double ds = p[j] * (dp[j] - mean) * scale;
        const double ds_abs = p[j] * (std::abs(dp[j] - mean) + dp_abs[j]) * scale;
        for (int64_t c = 0; c < e; ++c) {
          r.dq.at(b, i, c) += ds * k.at(b, j, c);
          r.dk.at(b, j, c) += ds * q.at(b, i, c);
          r.dq_abs.at(b, i, c) += ds_abs * std::abs(k.at(b, j, c));
          r.dk_abs.at(b, j, c) += ds_abs * std::abs(q.at(b, i, c));
        }
        for (int64_t c = 0; c < f; ++c) {
          r.dv.at(b, j, c) += p[j] * d_o.at(b, i, c);
          r.dv_abs.at(b, j, c) += p[j] * std::abs(d_o.at(b, i, c));
        }
      }
    }
  return r;
}

/// |got − want| ≤ tol·(1 + |want|), plus, with `rounded` (the terms' magnitudes), what
/// rounding factors of the terms to bf16 twice may change (2⁻⁸ each, with a factor 2 to spare).
inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what, const std::vector<double>* rounded = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (rounded) {
    ASSERT_EQ(rounded->size(), want.size()) << what;
  }
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    const double allowed = tol * (1 + std::abs(want[i])) + (rounded ? (*rounded)[i] / 64 : 0);
    if (!same_inf && !(std::abs(got[i] - want[i]) <= allowed))
      if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

enum class Mask { none, causal, random_rows, additive, padding };

struct Case {
  int64_t n, t, s, e, f;
  Mask mask;
  DType dtype;
  double tol;
  bool shared = false;  // one [t, s] mask broadcast (stride 0) over the batch
};

inline Mat make_bias(const Case& c, std::mt19937& rng) {
  Mat b{c.n, c.t, c.s, std::vector<double>(c.n * c.t * c.s, 0.0)};
  std::uniform_real_distribution<double> u;
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t j = 0; j < c.s; ++j) {
        double& x = b.at(n, i, j);
        switch (c.mask) {
          case Mask::causal: x = j > i ? -kInf : 0; break;
          case Mask::random_rows: x = (i % 5 == 3 || u(rng) < 0.3) ? -kInf : 0; break;  // rows 3, 8, ...: all masked
          case Mask::additive: x = u(rng) < 0.2 ? -kInf : u(rng) - 0.5; break;
          case Mask::padding: {  // each row's last keys masked (rows 5, 12, ...: all of them)
            const int64_t limit = i % 7 == 5 ? 0 : c.s - (i * 13 + n * 5) % (c.s / 2 + 1);
            x = j >= limit ? -kInf : 0;
            break;
          }
          case Mask::none: break;
        }
      }
  return b;
}

/// The kernel on `device` (the CPU, or the fake CUDA device's CUDA kernels) against the
/// float64 definition.
inline void run_case(const Case& c, Device device = cpu()) {
  SCOPED_TRACE(fmt::format("n {} t {} s {} e {} f {} mask {} {} on {}", c.n, c.t, c.s, c.e, c.f,
                           static_cast<int>(c.mask), dtype_name(c.dtype), device.str()));
  const auto on = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  std::mt19937 rng(static_cast<unsigned>(c.n * 131 + c.t * 17 + c.s * 7 + c.e + static_cast<int>(c.mask)));
  const Mat q = random_mat(c.n, c.t, c.e, rng), k = random_mat(c.n, c.s, c.e, rng),
            v = random_mat(c.n, c.s, c.f, rng), d_o = random_mat(c.n, c.t, c.f, rng);
  Mat bias = make_bias(c, rng);
  if (c.shared)  // every batch row gets row 0's mask
    for (int64_t b = 1; b < c.n; ++b)
      std::copy_n(bias.v.begin(), c.t * c.s, bias.v.begin() + b * c.t * c.s);
  const bool has_bias = c.mask != Mask::none;
  const double scale = 1 / std::sqrt(static_cast<double>(std::max<int64_t>(c.e, 1)));
  // The inputs rounded to the dtype first, so the reference sees what the kernel sees.
  Tensor tq = tensor_of(q, c.dtype), tk = tensor_of(k, c.dtype), tv = tensor_of(v, c.dtype);
  if (c.dtype == DType::bf16) {  // bf16 rows read through a row stride wider than a row
    tq = tq.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
    tk = tk.permute({1, 0, 2}).contiguous().permute({1, 0, 2});
  }
  const Reference want = reference(mat_of(tq), mat_of(tk), mat_of(tv), has_bias ? &bias : nullptr,
                                   scale, d_o);
  const DType out_dtype = c.dtype == DType::f64 ? DType::f64 : DType::f32;
  // (broadcast on the device: a copy to it would make the stride-0 view dense)
  Tensor tb = has_bias ? tensor_of(bias, out_dtype).to(device) : Tensor();
  if (has_bias && c.shared) tb = tb.slice(0, 0, 1).as_strided({c.n, c.t, c.s}, {0, c.s, 1}, 0);
  const Tensor packed = attention_forward(on(tq), on(tk), on(tv), tb, scale, out_dtype);
  ASSERT_EQ(packed.shape(), (Shape{c.n, c.t, c.f + 1}));
  ASSERT_EQ(packed.device(), device);
  const std::vector<double> got = packed.to(cpu()).to(DType::f64).to_vector<double>();
  std::vector<double> o, lse;
  for (int64_t r = 0; r < c.n * c.t; ++r) {
    for (int64_t col = 0; col < c.f; ++col) o.push_back(got[r * (c.f + 1) + col]);
    lse.push_back(got[r * (c.f + 1) + c.f]);
  }
  // bf16 operands on AMX: P, dS and dO are rounded to bf16 for the tile products; on CUDA
  // tensor cores P is rounded to the operands' dtype (and the backward reads that o).
  const bool rounded =
      (c.dtype == DType::bf16 && device.kind == DeviceKind::cpu && bf16_tiles()) ||
      (device.kind == DeviceKind::cuda &&
       cuda_attention_uses_tensor_cores(on(tq), on(tk), on(tv), out_dtype));
  const auto terms = [&](const Mat& m) { return rounded ? &m.v : nullptr; };
  expect_near(o, want.o.v, c.tol, "o", terms(want.o_abs));
  expect_near(lse, want.lse, c.tol, "lse");
  // The cotangent packed like the result; its lse column must be ignored (fill it with junk).
  std::vector<double> d_packed;
  for (int64_t r = 0; r < c.n * c.t; ++r) {
    for (int64_t col = 0; col < c.f; ++col) d_packed.push_back(d_o.v[r * c.f + col]);
    d_packed.push_back(1e6);
  }
  const Tensor td = from_data(d_packed, {c.n, c.t, c.f + 1}).to(out_dtype);
  const Tensor grads =
      attention_backward(on(tq), on(tk), on(tv), tb, packed, on(td), scale, out_dtype);
  ASSERT_EQ(grads.shape(), (Shape{c.n * (c.t * c.e + c.s * c.e + c.s * c.f)}));
  const std::vector<double> g = grads.to(cpu()).to(DType::f64).to_vector<double>();
  const auto at = g.begin();
  const int64_t nq = c.n * c.t * c.e, nk = c.n * c.s * c.e;
  const std::vector<double> dq(at, at + nq), dk(at + nq, at + nq + nk), dv(at + nq + nk, g.end());
  expect_near(dq, want.dq.v, c.tol, "dq", terms(want.dq_abs));
  expect_near(dk, want.dk.v, c.tol, "dk", terms(want.dk_abs));
  expect_near(dv, want.dv.v, c.tol, "dv", terms(want.dv_abs));
}

// q [b, h, t, e] with h = g·r heads; k, v [b, g, s, e]: the same as k, v repeated per group
// (repeat(k, "b g s e -> b (g r) s e")), and dk, dv the repeated ones' gradients summed over
// each group. The mask is one causal [t, s] matrix broadcast (stride 0) over b and h.
// bf16 operands (q, k, v rounded to bf16 for both sides) compare the AMX kernels' group
// loop with their one-head path, on CPUs that have AMX.
inline void grouped_query_heads(Device device, double tol, DType dtype = DType::f64, int64_t e = 5,
                         int64_t t = 19) {
  std::mt19937 rng(9);
  const int64_t b = 2, g = 2, r = 3, h = g * r, s = t;
  auto random = [&](Shape shape) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    std::normal_distribution<double> d;
    std::vector<double> v(n);
    for (double& x : v) x = d(rng);
    return from_data(v, shape);
  };
  const DType compute = dtype == DType::f64 ? DType::f64 : DType::f32;
  const auto as = [&](const Tensor& x) { return x.to(dtype).to(DType::f64); };  // rounded
  const Tensor q = as(random({b, h, t, e})), k = as(random({b, g, s, e})),
               v = as(random({b, g, s, e})), d = random({b, h, t, e + 1});
  // The repeat, spelt out: head j of the repeated tensor is group j / r.
  auto repeated = [&](const Tensor& x) {
    const std::vector<double> src = x.to_vector<double>();
    std::vector<double> out;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t j = 0; j < h; ++j) {
        const double* at = src.data() + ((bi * g + j / r) * s) * e;
        out.insert(out.end(), at, at + s * e);
      }
    return from_data(out, {b, h, s, e});
  };
  std::vector<double> causal(t * s);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j) causal[i * s + j] = j > i ? -kInf : 0;
  const Tensor mask = from_data(causal, {1, 1, t, s})
                          .to(device)
                          .as_strided({b, h, t, s}, {0, 0, s, 1}, 0);
  const auto on = [&](const Tensor& x) { return x.to(dtype).to(device); };
  const auto host = [](const Tensor& x) { return x.to(cpu()).to(DType::f64).to_vector<double>(); };
  const Tensor mask_here = dtype == DType::f64 ? mask : mask.to(compute);
  // The plain heads run on the CPU in f64 (checking the device against it), on the device in
  // bf16 (whose kernels round differently from the CPU's).
  const Device plain_device = dtype == DType::f64 ? cpu() : device;
  const auto plain_on = [&](const Tensor& x) { return x.to(dtype).to(plain_device); };
  const Tensor plain_mask = from_data(causal, {1, 1, t, s})
                                .to(compute)
                                .to(plain_device)
                                .as_strided({b, h, t, s}, {0, 0, s, 1}, 0);
  const Tensor grouped = attention_forward(on(q), on(k), on(v), mask_here, 0.4, compute, r);
  const Tensor plain = attention_forward(plain_on(q), plain_on(repeated(k)),
                                         plain_on(repeated(v)), plain_mask, 0.4, compute);
  expect_near(host(grouped), host(plain), tol, "o | lse");
  const std::vector<double> gg = host(attention_backward(
      on(q), on(k), on(v), mask_here, grouped, d.to(compute).to(device), 0.4, compute, r));
  const std::vector<double> gp =
      host(attention_backward(plain_on(q), plain_on(repeated(k)), plain_on(repeated(v)),
                              plain_mask, plain, d.to(compute).to(plain_device), 0.4, compute));
  const int64_t nq = b * h * t * e, nkg = b * g * s * e, nkp = b * h * s * e;
  ASSERT_EQ(gg.size(), static_cast<size_t>(nq + 2 * nkg));
  expect_near(std::vector<double>(gg.begin(), gg.begin() + nq),
              std::vector<double>(gp.begin(), gp.begin() + nq), tol, "dq");
  for (int part = 0; part < 2; ++part) {  // dk, then dv: summed over each group's heads
    std::vector<double> want(nkg, 0.0);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t j = 0; j < h; ++j)
        for (int64_t x = 0; x < s * e; ++x)
          want[(bi * g + j / r) * s * e + x] += gp[nq + part * nkp + (bi * h + j) * s * e + x];
    expect_near(std::vector<double>(gg.begin() + nq + part * nkg, gg.begin() + nq + (part + 1) * nkg),
                want, tol, part == 0 ? "dk" : "dv");
  }
}

}  // namespace ein::attention_testing
