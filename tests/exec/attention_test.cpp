// The fused attention (compiler/fuse/attention.h, exec/attention.h):
//  - Kernel.*: attention_forward/backward against a float64 evaluation of the definition
//    (softmax(scale q kᵀ + bias) v and its gradients), on odd sizes that are no multiple of the
//    tiles, masks with fully masked rows, causal masks (skipped tiles), broadcast and permuted
//    operands, zero sizes, f64/f32/bf16; the f64 kernel's gradients against finite differences.
//  - Recogniser.*: a table of attention spellings in `.ein` (positive: fused, same values and
//    gradients as the unfused trace; negative: left unfused, with the reason).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <fmt/format.h>

#include "compiler/fuse/attention.h"
#include "exec/amx_tiles.h"
#include "exec/attention.h"
#include "exec/attention_cuda.h"
#include "exec/attention_cuda_mma.h"
#include "exec/tile_gemm.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/nvrtc.h"
#include "script/script.h"
#include "support/fake_cuda.h"
#include "support/scoped_env.h"

namespace ein {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Row-major [n, rows, cols] doubles.
struct Mat {
  int64_t n = 0, rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int64_t b, int64_t i, int64_t j) { return v[(b * rows + i) * cols + j]; }
  double at(int64_t b, int64_t i, int64_t j) const { return v[(b * rows + i) * cols + j]; }
};

Mat random_mat(int64_t n, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<double> d;
  Mat m{n, rows, cols, std::vector<double>(n * rows * cols)};
  for (double& x : m.v) x = d(rng);
  return m;
}

Tensor tensor_of(const Mat& m, DType dtype) {
  return from_data(m.v, {m.n, m.rows, m.cols}).to(dtype);
}

Mat mat_of(const Tensor& t) {
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

Reference reference(const Mat& q, const Mat& k, const Mat& v, const Mat* bias, double scale,
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
void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol,
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

Mat make_bias(const Case& c, std::mt19937& rng) {
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
void run_case(const Case& c, Device device = cpu()) {
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

TEST(AttentionKernel, MatchesTheDefinitionInFloat64) {
  // Causal and padding masks run as per-row key limits, the others add the bias.
  for (Mask m : {Mask::none, Mask::causal, Mask::random_rows, Mask::additive, Mask::padding}) {
    run_case({3, 37, 53, 7, 5, m, DType::f64, 1e-10});   // odd sizes, one partial tile
    run_case({2, 130, 261, 16, 9, m, DType::f64, 1e-10}); // several tiles, partial last ones
    run_case({2, 130, 261, 16, 9, m, DType::f32, 2e-4});
    run_case({2, 70, 200, 33, 70, m, DType::f32, 2e-4});  // rows wider than a 64-column panel
    // bf16 operands: on a CPU with AMX the tile products take them as they are and round P,
    // dS and dO to bf16 (attention_amx.h); elsewhere, and with AMX turned off, the f32 kernels
    // widen them row block by row block.
    run_case({2, 130, 261, 16, 9, m, DType::bf16, 2e-4});
    run_case({2, 70, 200, 33, 70, m, DType::bf16, 2e-4});
    force_no_amx_tiles(true);
    run_case({2, 130, 261, 16, 9, m, DType::bf16, 2e-4});
    force_no_amx_tiles(false);
    // The portable tile kernels (the BLAS and vector_math.h), as CPUs without AVX-512 run them.
    force_portable_tile_kernels(true);
    run_case({2, 130, 261, 16, 9, m, DType::f32, 2e-4});
    force_portable_tile_kernels(false);
  }
  run_case({2, 70, 70, 8, 8, Mask::causal, DType::bf16, 2e-4});
  run_case({1, 1, 1, 1, 1, Mask::none, DType::bf16, 2e-4});
}

TEST(AttentionKernel, ZeroSizes) {
  run_case({0, 5, 5, 4, 4, Mask::none, DType::f64, 1e-12});
  run_case({2, 0, 5, 4, 4, Mask::causal, DType::f64, 1e-12});
  run_case({2, 5, 0, 4, 4, Mask::none, DType::f64, 1e-12});  // no keys: o = 0, lse = -inf
  run_case({2, 5, 6, 0, 4, Mask::none, DType::f64, 1e-12});  // logits 0: a uniform average
  run_case({2, 5, 6, 4, 0, Mask::additive, DType::f64, 1e-12});
}

TEST(AttentionKernel, SpecialValuesPropagateLikeTheUnfusedSoftmax) {
  // A NaN in q spoils its row only; an inf in k makes the rows that see it NaN or one-hot,
  // as exp(x - max) does; a masked position ignores whatever q·k is there.
  Mat q{1, 3, 2, {1, 2, NAN, 0, 0.5, -0.5}}, k{1, 4, 2, {1, 0, 0, 1, 1, 1, -1, 0}};
  Mat v{1, 4, 1, {1, 2, 3, 4}}, d{1, 3, 1, {1, 1, 1}};
  const Reference want = reference(q, k, v, nullptr, 1.0, d);
  const Tensor out = attention_forward(tensor_of(q, DType::f32), tensor_of(k, DType::f32),
                                       tensor_of(v, DType::f32), Tensor(), 1.0, DType::f32);
  const std::vector<double> got = out.to(DType::f64).to_vector<double>();
  EXPECT_NEAR(got[0], want.o.v[0], 1e-5);
  EXPECT_TRUE(std::isnan(got[2])) << "row 1 has a NaN query";
  EXPECT_NEAR(got[4], want.o.v[2], 1e-5);
  // An infinite logit under a -inf mask stays masked.
  Mat kinf{1, 2, 1, {kInf, 1}}, q1{1, 1, 1, {1}}, v2{1, 2, 1, {10, 20}}, mask{1, 1, 2, {-kInf, 0}};
  const Tensor masked = attention_forward(tensor_of(q1, DType::f32), tensor_of(kinf, DType::f32),
                                          tensor_of(v2, DType::f32), tensor_of(mask, DType::f32),
                                          1.0, DType::f32);
  EXPECT_EQ(masked.to(DType::f64).to_vector<double>()[0], 20.0);
}

TEST(AttentionKernel, BroadcastAndPermutedOperandsAreReadInPlace) {
  // q given as a permuted view ([t, n, e] storage), the bias a stride-0 broadcast of one
  // causal [t, s] matrix over the batch.
  std::mt19937 rng(5);
  const int64_t n = 3, t = 20, s = 20, e = 6, f = 4;
  const Mat q = random_mat(n, t, e, rng), k = random_mat(n, s, e, rng), v = random_mat(n, s, f, rng);
  const Tensor tq = tensor_of(q, DType::f32).permute({1, 0, 2}).contiguous().permute({1, 0, 2});
  ASSERT_FALSE(tq.is_contiguous());
  std::vector<double> causal(t * s);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j) causal[i * s + j] = j > i ? -kInf : 0;
  const Tensor one = from_data(causal, {1, t, s}).to(DType::f32);
  const Tensor broadcast = one.as_strided({n, t, s}, {0, s, 1}, 0);
  Mat full{n, t, s, {}};
  for (int64_t b = 0; b < n; ++b) full.v.insert(full.v.end(), causal.begin(), causal.end());
  const Mat d_o = random_mat(n, t, f, rng);
  const Reference want = reference(q, k, v, &full, 0.5, d_o);
  const Tensor out = attention_forward(tq, tensor_of(k, DType::f32), tensor_of(v, DType::f32),
                                       broadcast, 0.5, DType::f32);
  std::vector<double> o;
  const std::vector<double> got = out.to(DType::f64).to_vector<double>();
  for (int64_t r = 0; r < n * t; ++r)
    for (int64_t c = 0; c < f; ++c) o.push_back(got[r * (f + 1) + c]);
  expect_near(o, want.o.v, 2e-5, "o");
}

// q [b, h, t, e] with h = g·r heads; k, v [b, g, s, e]: the same as k, v repeated per group
// (repeat(k, "b g s e -> b (g r) s e")), and dk, dv the repeated ones' gradients summed over
// each group. The mask is one causal [t, s] matrix broadcast (stride 0) over b and h.
// bf16 operands (q, k, v rounded to bf16 for both sides) compare the AMX kernels' group
// loop with their one-head path, on CPUs that have AMX.
void grouped_query_heads(Device device, double tol, DType dtype = DType::f64, int64_t e = 5,
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

TEST(AttentionKernel, GroupedQueryHeadsReadTheirGroup) { grouped_query_heads(cpu(), 1e-12); }
TEST(AttentionKernel, GroupedQueryHeadsReadTheirGroupInBf16) {
  grouped_query_heads(cpu(), 1e-5, DType::bf16);
}

TEST(AttentionKernel, GradientsMatchFiniteDifferences) {
  // The f64 kernel's backward against central differences of its own forward.
  std::mt19937 rng(11);
  const int64_t n = 1, t = 9, s = 11, e = 3, f = 2;
  Mat q = random_mat(n, t, e, rng), k = random_mat(n, s, e, rng), v = random_mat(n, s, f, rng);
  const Mat w = random_mat(n, t, f, rng);  // loss = Σ w ∘ o
  Case c{n, t, s, e, f, Mask::causal, DType::f64, 0};
  Mat bias = make_bias(c, rng);
  if (c.shared)  // every batch row gets row 0's mask
    for (int64_t b = 1; b < c.n; ++b)
      std::copy_n(bias.v.begin(), c.t * c.s, bias.v.begin() + b * c.t * c.s);
  auto loss = [&](const Mat& qq, const Mat& kk, const Mat& vv) {
    const Tensor out = attention_forward(tensor_of(qq, DType::f64), tensor_of(kk, DType::f64),
                                         tensor_of(vv, DType::f64), tensor_of(bias, DType::f64),
                                         0.7, DType::f64);
    const std::vector<double> o = out.to_vector<double>();
    double sum = 0;
    for (int64_t r = 0; r < t; ++r)
      for (int64_t col = 0; col < f; ++col) sum += w.v[r * f + col] * o[r * (f + 1) + col];
    return sum;
  };
  std::vector<double> d_packed;
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t col = 0; col < f; ++col) d_packed.push_back(w.v[r * f + col]);
    d_packed.push_back(0);
  }
  const Tensor packed = attention_forward(tensor_of(q, DType::f64), tensor_of(k, DType::f64),
                                          tensor_of(v, DType::f64), tensor_of(bias, DType::f64),
                                          0.7, DType::f64);
  const std::vector<double> g =
      attention_backward(tensor_of(q, DType::f64), tensor_of(k, DType::f64),
                         tensor_of(v, DType::f64), tensor_of(bias, DType::f64), packed,
                         from_data(d_packed, {n, t, f + 1}), 0.7, DType::f64)
          .to_vector<double>();
  const double h = 1e-6;
  int64_t offset = 0;
  for (Mat* m : {&q, &k, &v}) {
    for (size_t i = 0; i < m->v.size(); ++i) {
      const double x = m->v[i];
      m->v[i] = x + h;
      const double up = loss(q, k, v);
      m->v[i] = x - h;
      const double down = loss(q, k, v);
      m->v[i] = x;
      EXPECT_NEAR(g[offset + i], (up - down) / (2 * h), 1e-7) << "element " << offset + i;
    }
    offset += static_cast<int64_t>(m->v.size());
  }
}

// ---------------------------------------------------------------------------------------------
// The recogniser, through `.ein` traces.

struct Spelling {
  const char* name;
  const char* body;  ///< the fn's body; q [b h t e] (or per `layout`), k, v [b h s e]
  bool fused;
  const char* why = "";  ///< negative cases: a phrase of the reason
  const char* layout = "b h t e";
};

const Spelling kSpellings[] = {
    {"gpt", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s") / sqrt(e)
  future = triu(ones(t, s), diagonal = 1)
  return einsum(softmax(where(future > 0, -inf, scores)), v, "b h t s, b h s e -> b h t e"))",
     true},
    {"scale_first_keep_branch", R"(scores = einsum(q * 0.125, k, "b h t e, b h s e -> b h t s")
  keep = tril(ones(t, s))
  return einsum(softmax(where(keep > 0, scores * 2.0, -inf)), v, "b h t s, b h s e -> b h t e"))",
     true},
    {"no_mask_multiply", R"(att = softmax(0.5 * einsum(q, k, "b h t e, b h s e -> b h t s"))
  return einsum(att, v, "b h t s, b h s e -> b h t e"))",
     true},
    {"keys_first_value_first", R"(scores = einsum(k, q, "b h s e, b h t e -> b h t s") / 3
  return einsum(v, softmax(scores), "b h s e, b h t s -> b h t e"))",
     true},
    {"sequence_major_layout", R"(scores = einsum(q, k, "b t h e, b s h e -> b h t s") / sqrt(e)
  future = triu(ones(t, s), diagonal = 1)
  att = softmax(where(future > 0, -inf, scores))
  return einsum(att, v, "b h t s, b s h e -> b t h e"))",
     true, "", "b t h e"},
    {"mask_then_scale", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  future = triu(ones(t, s), diagonal = 1)
  return einsum(softmax(where(future > 0, -inf, scores) / sqrt(e)), v, "b h t s, b h s e -> b h t e"))",
     true},
    // Negative cases.
    {"finite_fill", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  future = triu(ones(t, s), diagonal = 1)
  return einsum(softmax(where(future > 0, -1e9, scores)), v, "b h t s, b h s e -> b h t e"))",
     false, "not -inf"},
    {"float_bias", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  return einsum(softmax(scores + einsum(k, "b h s e -> s")), v, "b h t s, b h s e -> b h t e"))",
     false, "float tensors"},
    {"softmax_over_queries", R"(scores = einsum(q, k, "b h t e, b h s e -> b h s t")
  return einsum(softmax(scores), v, "b h s t, b h s e -> b h t e"))",
     false, ""},
    {"squared_scores", R"(scores = einsum(q, k, "b h t e, b h s e -> b h t s")
  return einsum(softmax(scores * scores), v, "b h t s, b h s e -> b h t e"))",
     false, "twice"},
    {"probabilities_reused", R"(att = softmax(einsum(q, k, "b h t e, b h s e -> b h t s"))
  return einsum(att, v, "b h t s, b h s e -> b h t e") + einsum(att, v * 2.0, "b h t s, b h s e -> b h t e"))",
     false, "read elsewhere"},
};

std::filesystem::path write_script(const Spelling& sp) {
  const auto dir = std::filesystem::temp_directory_path() / "ein_attention_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / (std::string(sp.name) + ".ein");
  const std::string kv = std::string(sp.layout) == "b t h e" ? "b s h e" : "b h s e";
  std::ofstream(path) << fmt::format(
      "import nn\nfn attend(q: f32[{}], k: f32[{}], v: f32[{}]) -> f32[{}] {{\n  {}\n}}\n",
      sp.layout, kv, kv, sp.layout, sp.body);
  return path;
}

int count_attention(const Graph& g) {
  int n = 0;
  for (const GraphNode& node : g.nodes) n += node.op == GraphOp::attention;
  return n;
}

/// `attend(q, k, v)` of two loads of one script (fused and not): equal values and gradients on
/// random inputs, q [qs], k and v [ks].
void expect_same_attention(script::Program& fused, script::Program& plain, const Shape& qs,
                           const Shape& ks) {
  std::mt19937 rng(3);
  auto random = [&](const Shape& shape) {
    std::normal_distribution<double> d;
    int64_t count = 1;
    for (int64_t x : shape) count *= x;
    std::vector<double> v(count);
    for (double& x : v) x = d(rng);
    return from_data(v, shape).to(DType::f32);
  };
  const Tensor q = random(qs), k = random(ks), v = random(ks), w = random(qs);
  std::vector<std::vector<double>> results;
  for (script::Program* p : {&fused, &plain}) {
    Tensor qq = q.detach().requires_grad_(), kk = k.detach().requires_grad_(),
           vv = v.detach().requires_grad_();
    const Tensor y = p->call("attend", {qq, kk, vv})[0];
    y.backward(w);
    std::vector<double> r = y.detach().to(DType::f64).to_vector<double>();
    for (const Tensor& x : {qq, kk, vv}) {
      const std::vector<double> gx = x.grad().to(DType::f64).to_vector<double>();
      r.insert(r.end(), gx.begin(), gx.end());
    }
    results.push_back(std::move(r));
  }
  expect_near(results[0], results[1], 2e-5, "fused against unfused");
}

TEST(AttentionRecogniser, SpellingsTable) {
  for (const Spelling& sp : kSpellings) {
    SCOPED_TRACE(sp.name);
    const auto path = write_script(sp);
    const bool seq_major = std::string(sp.layout) == "b t h e";
    const Shape qs = seq_major ? Shape{2, 19, 3, 8} : Shape{2, 3, 19, 8};
    const Shape ks = seq_major ? Shape{2, 23, 3, 8} : Shape{2, 3, 23, 8};
    // t = s for the causal spellings whose mask is square; else 19 queries over 23 keys.
    const bool square = std::string(sp.body).find("ones(t, s)") != std::string::npos;
    const Shape ks2 = square ? qs : ks;
    std::vector<TensorType> types{{qs, DType::f32}, {ks2, DType::f32}, {ks2, DType::f32}};
    script::LoadOptions on, off;
    on.stdlib = off.stdlib = {EIN_STDLIB_DIR};
    off.fused_attention = false;
    auto fused = script::Program::load(path.string(), on);
    auto plain = script::Program::load(path.string(), off);
    const Graph g = fused->trace("attend", types);
    ASSERT_EQ(count_attention(g), sp.fused ? 1 : 0) << dump(g);
    ASSERT_EQ(count_attention(plain->trace("attend", types)), 0);
    if (!sp.fused) {
      // The reason names the failed condition.
      const AttentionFusion f = fuse_attention(plain->trace("attend", types));
      ASSERT_FALSE(f.misses.empty());
      EXPECT_NE(f.misses[0].why.find(sp.why), std::string::npos) << f.misses[0].why;
      continue;
    }
    // Same values and gradients as the unfused trace.
    expect_same_attention(*fused, *plain, qs, ks2);
  }
}

TEST(AttentionRecogniser, GroupedQueryHeadsAreNotCopied) {
  // stdlib/llama.ein's spelling: k and v repeated per group with einops' repeat. The fused
  // node reads the groups (kv groups of 2), and values and gradients equal the unfused trace.
  const auto dir = std::filesystem::temp_directory_path() / "ein_attention_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "gqa.ein";
  std::ofstream(path) << R"(import nn
fn attend(q: f32[b h t e], k: f32[b g t e], v: f32[b g t e]) -> f32[b h t e] {
  kk = repeat(k, "b g t e -> b (g r) t e", r = h // g)
  vv = repeat(v, "b g t e -> b (g r) t e", r = h // g)
  scores = einsum(q, kk, "b h t e, b h s e -> b h t s") / sqrt(e)
  future = triu(ones(t, t), diagonal = 1)
  return einsum(softmax(where(future > 0, -inf, scores)), vv, "b h t s, b h s e -> b h t e")
}
)";
  const Shape qs{2, 4, 21, 8}, ks{2, 2, 21, 8};
  const std::vector<TensorType> types{{qs, DType::f32}, {ks, DType::f32}, {ks, DType::f32}};
  script::LoadOptions on, off;
  on.stdlib = off.stdlib = {EIN_STDLIB_DIR};
  off.fused_attention = false;
  auto fused = script::Program::load(path.string(), on);
  auto plain = script::Program::load(path.string(), off);
  int groups = 0;
  for (const GraphNode& n : fused->trace("attend", types).nodes)
    if (n.op == GraphOp::attention) groups = static_cast<int>(std::get<AttentionAttr>(n.attr).kv_repeat);
  ASSERT_EQ(groups, 2);
  expect_same_attention(*fused, *plain, qs, ks);
}

// The CUDA kernels (exec/attention_cuda.h) on the fake CUDA device and, where there is one, on
// a GPU: the same cases against the float64 definition (odd sizes, partial tiles, every mask,
// fully masked rows, bf16 in), zero sizes, grouped-query heads with a broadcast mask; on the
// fake device each kernel is also compiled by NVRTC for sm_80 and sm_90 where NVRTC loads.
class AttentionOnCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "fake") {
      std::string why;
      if (!testing::FakeCudaDevice::available(&why)) GTEST_SKIP() << why;
      fake_ = std::make_unique<testing::FakeCudaDevice>();
    } else if (!cuda_is_available()) {
      GTEST_SKIP() << "no GPU: " << cuda_driver_info().reason;
    }
  }
  std::unique_ptr<testing::FakeCudaDevice> fake_;
};

TEST_P(AttentionOnCuda, MatchesTheDefinitionInFloat64) {
  for (Mask m : {Mask::none, Mask::causal, Mask::random_rows, Mask::additive, Mask::padding}) {
    run_case({2, 37, 53, 7, 5, m, DType::f64, 1e-10}, cuda());
    run_case({2, 70, 75, 16, 9, m, DType::f32, 2e-4}, cuda());
    // a mask shared by the batch: per-row key limits where a row is "zeros, then -inf"
    run_case({2, 37, 53, 7, 5, m, DType::f64, 1e-10, true}, cuda());
    run_case({2, 70, 75, 16, 9, m, DType::f32, 2e-4, true}, cuda());
  }
  run_case({2, 40, 40, 8, 8, Mask::causal, DType::bf16, 2e-4}, cuda());
  if (fake_) {
    EXPECT_GT(fake_->launches(), 0);
  }
}

// The tensor-core kernels (attention_cuda_mma.h), both sets (PTX's mma.sync under
// EIN_CUDA_ATTENTION=ptx on sm_80+; WMMA, the default): every mask per batch row (read per
// element) and shared (per-row key limits, or per element where a row is not "zeros, then
// -inf"), partial row blocks and key tiles, both key tile sizes of the backward, bf16 and f16.
TEST_P(AttentionOnCuda, TensorCoresMatchTheDefinition) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string kernels : {"ptx", ""}) {
    SCOPED_TRACE("kernels: " + (kernels.empty() ? std::string("default (wmma)") : kernels));
    const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", kernels);
    EXPECT_EQ(detail::attention_uses_ptx(90), kernels == "ptx");
    for (Mask m : {Mask::none, Mask::causal, Mask::random_rows, Mask::additive, Mask::padding})
      for (bool shared : {false, true})
        run_case({2, 70, 75, 16, 16, m, DType::bf16, 2e-4, shared}, cuda());
    run_case({2, 37, 130, 32, 48, Mask::causal, DType::f16, 2e-4, true}, cuda());
    run_case({1, 65, 40, 128, 128, Mask::padding, DType::bf16, 2e-4, true}, cuda());  // 32-key tiles
    run_case({1, 130, 150, 64, 128, Mask::random_rows, DType::bf16, 2e-4}, cuda());
  }
  const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", "ptx");
  EXPECT_FALSE(detail::attention_uses_ptx(75));  // f16 on Turing: the WMMA kernels
  const Tensor q = zeros({1, 4, 16}, DType::bf16, cuda());
  const Tensor v = zeros({1, 4, 16}, DType::bf16, cuda());
  EXPECT_TRUE(cuda_attention_uses_tensor_cores(q, q, v, DType::f32));
  EXPECT_FALSE(cuda_attention_uses_tensor_cores(q, q, v, DType::f64));
  EXPECT_FALSE(cuda_attention_uses_tensor_cores(q, q, zeros({1, 4, 8}, DType::bf16, cuda()),
                                                DType::f32));  // f not a multiple of 16
  EXPECT_FALSE(cuda_attention_uses_tensor_cores(q.to(DType::f32), q, v, DType::f32));
}

TEST_P(AttentionOnCuda, TensorCoresPropagateSpecialValues) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  // bf16 q [1, 3, 16]: row 1 NaN, row 2 subnormal; k's last key has +inf, masked for every row:
  // a mask of zeros then -inf (per-row key limits), then with an additive term in row 2 (that
  // row's mask read per element).
  std::mt19937 rng(3);
  Mat q = random_mat(1, 3, 16, rng), k = random_mat(1, 4, 16, rng), v = random_mat(1, 4, 16, rng);
  q.at(0, 1, 5) = NAN;
  for (int64_t c = 0; c < 16; ++c) q.at(0, 2, c) = 1e-39 * (c + 1);
  k.at(0, 3, 0) = kInf;
  q.at(0, 0, 0) = 1;
  const Mat d = random_mat(1, 3, 16, rng);
  for (const std::string kernels : {"ptx", ""})
    for (bool additive : {false, true}) {
      SCOPED_TRACE("kernels: " + kernels + (additive ? ", additive" : ""));
      const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", kernels);
      Mat mask{1, 3, 4, std::vector<double>(12, 0.0)};
      for (int64_t i = 0; i < 3; ++i) mask.at(0, i, 3) = -kInf;  // key 3: masked for every row
      if (additive) mask.at(0, 2, 1) = 0.25;
      const Reference want = reference(q, k, v, &mask, 0.25, d);
      const auto on_gpu = [](const Mat& m) { return tensor_of(m, DType::bf16).to(cuda()); };
      const Tensor tq = on_gpu(q), tk = on_gpu(k), tv = on_gpu(v);
      ASSERT_TRUE(cuda_attention_uses_tensor_cores(tq, tk, tv, DType::f32));
      const std::vector<double> got =
          attention_forward(tq, tk, tv, tensor_of(mask, DType::f32).to(cuda()), 0.25, DType::f32)
              .to(cpu())
              .to(DType::f64)
              .to_vector<double>();
      for (int64_t c = 0; c <= 16; ++c) {
        EXPECT_TRUE(std::isnan(got[17 + c])) << "row 1 has a NaN query, column " << c;
        for (int64_t row : {0, 2}) {
          const double w = c < 16 ? want.o.v[row * 16 + c] : want.lse[row];
          EXPECT_NEAR(got[row * 17 + c], w, 1e-2 * (1 + std::abs(w))) << row << " " << c;
        }
      }
    }
}

TEST_P(AttentionOnCuda, TensorCoresReadGroupedQueryHeads) {
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  for (const std::string kernels : {"ptx", ""}) {
    SCOPED_TRACE("kernels: " + kernels);
    const testing::ScopedEnv choice("EIN_CUDA_ATTENTION", kernels);
    grouped_query_heads(cuda(), 1e-5, DType::bf16, 16);
    // several query tiles per head and key blocks past the first (whose causal start skips the
    // tiles above the diagonal) in every group
    grouped_query_heads(cuda(), 1e-5, DType::bf16, 16, 100);
  }
}

TEST_P(AttentionOnCuda, ZeroSizes) {
  run_case({0, 5, 5, 4, 4, Mask::none, DType::f64, 1e-12}, cuda());
  run_case({2, 0, 5, 4, 4, Mask::causal, DType::f64, 1e-12}, cuda());
  run_case({2, 5, 0, 4, 4, Mask::none, DType::f64, 1e-12}, cuda());
}

TEST_P(AttentionOnCuda, GroupedQueryHeadsReadTheirGroup) { grouped_query_heads(cuda(), 1e-12); }

// The tensor-core kernels compiled by NVRTC for sm_80 and sm_90 where registers are tightest
// (the widest heads, where dK and dV take a kernel each and the backward tiles of 16), at
// GPT-2's width and a narrow one: no local memory (a spill would cost every GPU run). Their
// values are checked above; this covers widths the value tests do not run.
TEST(AttentionTensorCoreKernels, CompileWithoutLocalMemory) {
  if (!nvrtc_info().available) GTEST_SKIP() << nvrtc_info().reason;
  if (const std::string why = testing::wmma_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  struct Width {
    int64_t e, f;
    DType in;
  };
  for (const Width w : {Width{16, 16, DType::bf16}, Width{64, 64, DType::bf16},
                        Width{128, 64, DType::bf16}, Width{64, 128, DType::bf16},
                        Width{112, 128, DType::bf16}, Width{128, 112, DType::bf16},
                        Width{128, 128, DType::bf16}, Width{128, 128, DType::f16}}) {
    const int forward_tile = detail::attention_mma_key_tile(w.e, w.f, false);
    const int backward_tile = detail::attention_mma_key_tile(w.e, w.f, true);
    std::vector<std::pair<std::string, std::string>> kernels = {
        {detail::attention_mma_forward_source(w.in, DType::f32, w.e, w.f, forward_tile),
         "ein_attention_forward_mma"},
        {detail::attention_ptx_forward_source(w.in, DType::f32, w.e, w.f),
         "ein_attention_forward_ptx"},
        {detail::attention_ptx_dq_source(w.in, DType::f32, w.e, w.f), "ein_attention_dq_ptx"},
        {detail::attention_mma_dq_source(w.in, DType::f32, w.e, w.f, backward_tile),
         "ein_attention_dq_mma"}};
    const bool split = detail::attention_mma_split_dkv(w.e, w.f);
    for (int part : split ? std::vector<int>{1, 2} : std::vector<int>{0}) {
      kernels.emplace_back(
          detail::attention_mma_dkv_source(w.in, DType::f32, w.e, w.f, backward_tile, part),
          "ein_attention_dkv_mma");
      kernels.emplace_back(detail::attention_ptx_dkv_source(w.in, DType::f32, w.e, w.f, part),
                           "ein_attention_dkv_ptx");
    }
    for (const auto& [source, entry] : kernels)
      for (int arch : {80, 90}) {
        SCOPED_TRACE(fmt::format("{} e {} f {} {} sm_{}", entry, w.e, w.f, dtype_name(w.in), arch));
        const auto binary =
            CudaCompiler::instance().compile(source, entry + ".cu", {arch, true, {}});
        const auto usage = parse_ptxas_usage(binary->log, entry);
        ASSERT_TRUE(usage) << binary->log;
        EXPECT_EQ(usage->stack_frame, 0) << binary->log;
        EXPECT_EQ(usage->spill_stores, 0) << binary->log;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(FakeCuda, AttentionOnCuda, ::testing::Values("fake"));
INSTANTIATE_TEST_SUITE_P(Gpu, AttentionOnCuda, ::testing::Values("gpu"));

}  // namespace
}  // namespace ein
