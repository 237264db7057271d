// FlashAttention-2 on the CPU (attention.h). Per batch index n the operands are row-major
// matrices: q [T, E], k [S, E], v [S, F]; the bias is read through its strides. Tiles are Bq
// query rows × Bk keys: the logits tile is one GEMM (scale folded into alpha), the bias is
// added, and the probabilities tile goes into a second GEMM. exp runs vectorised (a
// polynomial compiled for AVX-512, AVX2 and the baseline, picked at load time).
#include "exec/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "runtime/blas/gemm.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// x[i] = exp(x[i] - shift) for i < n; returns the sum. Cephes' expf range reduction
/// (x = k·ln2 + r, |r| ≤ ln2/2) and a degree-6 polynomial: under 2 ulps over the range softmax
/// uses (arguments ≤ 0); exp(-inf) = 0, NaN stays NaN. Branch-free so that it vectorises.
__attribute__((target_clones("avx512f", "avx2", "default"))) float exp_shift_sum(float* x,
                                                                                  int64_t n,
                                                                                  float shift) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float a = x[i] - shift;
    const bool under = a < -87.33654f;  // below: exp underflows (subnormals flushed to 0)
    a = under ? -87.33654f : a;
    a = a > 88.72283f ? 88.72283f : a;
    const float kf = __builtin_floorf(a * 1.44269504088896341f + 0.5f);
    float r = a - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int k = static_cast<int>(kf);
    uint32_t bits = static_cast<uint32_t>(k + 127) << 23;
    float scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    float e = p * scale;
    e = under ? 0.0f : e;
    e = a != a ? a : e;  // NaN
    x[i] = e;
    sum += e;
  }
  return sum;
}

double exp_shift_sum(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

template <class T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

/// One GEMM on the calling thread: C = alpha·op(A)·op(B) + beta·C.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  GemmBatch g;
  g.dtype = dtype_of<T>();
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = ta;
  g.trans_b = tb;
  g.a = a;
  g.lda = std::max<int64_t>(1, lda);
  g.b = b;
  g.ldb = std::max<int64_t>(1, ldb);
  g.c = c;
  g.ldc = std::max<int64_t>(1, ldc);
  g.alpha = alpha;
  g.beta = beta;
  gemm_on_this_thread(g);
}

/// x as a contiguous CPU tensor of dtype `dt` (x itself when it is one).
Tensor dense(const Tensor& x, DType dt) {
  Tensor y = x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
  if (y.dtype() != dt) y = y.to(dt);
  return y.is_contiguous() ? y : y.contiguous();
}

/// The operands as contiguous CPU arrays of T, batch dims flattened, and the bias's strides.
template <class T>
struct Operands {
  Tensor q, k, v, bias;
  int64_t n = 1, t = 0, s = 0, e = 0, f = 0;
  std::vector<int64_t> batch_shape, bias_batch_strides;
  int64_t bias_t = 0, bias_s = 0;  ///< the bias's strides along t and s

  Operands(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in) {
    const DType dt = dtype_of<T>();
    q = dense(q_in, dt);
    k = dense(k_in, dt);
    v = dense(v_in, dt);
    const size_t r = q.shape().size();
    if (r < 2 || k.shape().size() != r || v.shape().size() != r)
      throw std::logic_error("internal error: attention operands of different ranks");
    for (size_t d = 0; d + 2 < r; ++d) {
      batch_shape.push_back(q.shape()[d]);
      n *= q.shape()[d];
    }
    t = q.shape()[r - 2];
    e = q.shape()[r - 1];
    s = k.shape()[r - 2];
    f = v.shape()[r - 1];
    if (bias_in.defined()) {
      bias = bias_in.device().kind == DeviceKind::cpu && bias_in.dtype() == dt
                 ? bias_in
                 : bias_in.to(cpu()).to(dt);
      for (size_t d = 0; d + 2 < r; ++d) bias_batch_strides.push_back(bias.stride(static_cast<int64_t>(d)));
      bias_t = bias.stride(static_cast<int64_t>(r) - 2);
      bias_s = bias.stride(static_cast<int64_t>(r) - 1);
    }
  }

  /// Batch n's bias (null without one).
  const T* bias_at(int64_t index) const {
    if (!bias.defined()) return nullptr;
    int64_t offset = 0;
    for (size_t d = batch_shape.size(); d-- > 0;) {
      offset += (index % batch_shape[d]) * bias_batch_strides[d];
      index /= batch_shape[d];
    }
    return bias.data<T>() + offset;
  }
};

/// Whether the bias is -inf over the whole tile [i0, i1) × [j0, j1).
template <class T>
bool masked_tile(const T* bias, int64_t bt, int64_t bs, int64_t i0, int64_t i1, int64_t j0,
                 int64_t j1) {
  if (bias == nullptr) return false;
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      const T b = bias[i * bt + j * bs];
      if (!(std::isinf(b) && b < 0)) return false;
    }
  return true;
}

/// The logits tile: scale · q[i0:i1] k[j0:j1]ᵀ + bias, into `tile` (row stride bk).
template <class T>
void logits_tile(const T* q, const T* k, const T* bias, const Operands<T>& o, double scale,
                 int64_t i0, int64_t i1, int64_t j0, int64_t j1, T* tile, int64_t bk) {
  gemm<T>(false, true, i1 - i0, j1 - j0, o.e, scale, q + i0 * o.e, o.e, k + j0 * o.e, o.e, 0,
          tile, bk);
  if (bias == nullptr) return;
  for (int64_t i = i0; i < i1; ++i) {
    T* row = tile + (i - i0) * bk;
    const T* b = bias + i * o.bias_t;
    for (int64_t j = j0; j < j1; ++j) {
      const T x = b[j * o.bias_s];
      row[j - j0] = std::isinf(x) && x < 0 ? x : row[j - j0] + x;  // masked whatever q·k is
    }
  }
}

template <class T>
Tensor forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in,
               double scale) {
  const Operands<T> o(q_in, k_in, v_in, bias_in);
  Shape out_shape = q_in.shape();
  out_shape.back() = o.f + 1;
  Tensor out = empty(out_shape, dtype_of<T>(), cpu());
  T* out_data = out.data<T>();
  const int64_t q_blocks = (o.t + kQueryBlock - 1) / kQueryBlock;
  const int64_t width = o.f + 1;
  parallel_for(0, o.n * q_blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> tile(kQueryBlock * kKeyBlock), acc(kQueryBlock * std::max<int64_t>(o.f, 1)),
        m(kQueryBlock), l(kQueryBlock);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / q_blocks, i0 = (task % q_blocks) * kQueryBlock,
                    i1 = std::min(o.t, i0 + kQueryBlock), bq = i1 - i0;
      const T* q = o.q.template data<T>() + n * o.t * o.e;
      const T* k = o.k.template data<T>() + n * o.s * o.e;
      const T* v = o.v.template data<T>() + n * o.s * o.f;
      const T* bias = o.bias_at(n);
      std::fill(m.begin(), m.end(), static_cast<T>(-kInf));
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t j0 = 0; j0 < o.s; j0 += kKeyBlock) {
        const int64_t j1 = std::min(o.s, j0 + kKeyBlock), bk = j1 - j0;
        if (masked_tile(bias, o.bias_t, o.bias_s, i0, i1, j0, j1)) continue;
        logits_tile(q, k, bias, o, scale, i0, i1, j0, j1, tile.data(), kKeyBlock);
        for (int64_t i = 0; i < bq; ++i) {
          T* row = tile.data() + i * kKeyBlock;
          T mx = m[i];
          for (int64_t j = 0; j < bk; ++j) mx = row[j] > mx || std::isnan(row[j]) ? row[j] : mx;
          const T shift = std::isinf(mx) && mx < 0 ? T(0) : mx;
          const T sum = exp_shift_sum(row, bk, shift);
          const T correction = std::exp(m[i] - shift);
          l[i] = l[i] * correction + sum;
          m[i] = mx;
          if (correction != T(1))
            for (int64_t c = 0; c < o.f; ++c) acc[i * o.f + c] *= correction;
        }
        gemm<T>(false, false, bq, o.f, bk, 1, tile.data(), kKeyBlock, v + j0 * o.f, o.f, 1,
                acc.data(), o.f);
      }
      for (int64_t i = 0; i < bq; ++i) {
        T* dst = out_data + (n * o.t + i0 + i) * width;
        const T inv = l[i] > 0 ? T(1) / l[i] : T(0);
        for (int64_t c = 0; c < o.f; ++c) dst[c] = acc[i * o.f + c] * inv;
        dst[o.f] = l[i] > 0 ? m[i] + std::log(l[i]) : static_cast<T>(-kInf);
      }
    }
  });
  return out;
}

template <class T>
Tensor backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in,
                const Tensor& out_in, const Tensor& d_in, double scale) {
  const Operands<T> o(q_in, k_in, v_in, bias_in);
  const Tensor out = dense(out_in, dtype_of<T>());
  const Tensor d_out = dense(d_in, dtype_of<T>());
  const int64_t width = o.f + 1, te = o.t * o.e, se = o.s * o.e, sf = o.s * o.f;
  Shape grad_shape(q_in.shape().begin(), q_in.shape().end() - 2);
  grad_shape.push_back(te + se + sf);
  Tensor grads = zeros(grad_shape, dtype_of<T>(), cpu());
  T* g_data = grads.data<T>();
  parallel_for(0, o.n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> p(kQueryBlock * kKeyBlock), dp(kQueryBlock * kKeyBlock),
        d_o(kQueryBlock * std::max<int64_t>(o.f, 1)), delta(kQueryBlock), lse(kQueryBlock);
    for (int64_t n = lo; n < hi; ++n) {
      const T* q = o.q.template data<T>() + n * te;
      const T* k = o.k.template data<T>() + n * se;
      const T* v = o.v.template data<T>() + n * sf;
      const T* bias = o.bias_at(n);
      T* dq = g_data + n * (te + se + sf);
      T* dk = dq + te;
      T* dv = dk + se;
      for (int64_t i0 = 0; i0 < o.t; i0 += kQueryBlock) {
        const int64_t i1 = std::min(o.t, i0 + kQueryBlock), bq = i1 - i0;
        // dO's tile (packed rows hold F values and the lse) and δ_i = Σ_c dO·O.
        for (int64_t i = 0; i < bq; ++i) {
          const T* orow = out.data<T>() + (n * o.t + i0 + i) * width;
          const T* grow = d_out.data<T>() + (n * o.t + i0 + i) * width;
          T dot = 0;
          for (int64_t c = 0; c < o.f; ++c) {
            d_o[i * o.f + c] = grow[c];
            dot += grow[c] * orow[c];
          }
          delta[i] = dot;
          lse[i] = orow[o.f];
        }
        for (int64_t j0 = 0; j0 < o.s; j0 += kKeyBlock) {
          const int64_t j1 = std::min(o.s, j0 + kKeyBlock), bk = j1 - j0;
          if (masked_tile(bias, o.bias_t, o.bias_s, i0, i1, j0, j1)) continue;
          logits_tile(q, k, bias, o, scale, i0, i1, j0, j1, p.data(), kKeyBlock);
          for (int64_t i = 0; i < bq; ++i) {
            const T shift = std::isinf(lse[i]) && lse[i] < 0 ? T(0) : lse[i];
            exp_shift_sum(p.data() + i * kKeyBlock, bk, shift);
          }
          // dV_j += Pᵀ dO_i;  dP = dO_i V_jᵀ;  dS = P ∘ (dP − δ);  dQ_i += s·dS K_j;
          // dK_j += s·dSᵀ Q_i.
          gemm<T>(true, false, bk, o.f, bq, 1, p.data(), kKeyBlock, d_o.data(), o.f, 1,
                  dv + j0 * o.f, o.f);
          gemm<T>(false, true, bq, bk, o.f, 1, d_o.data(), o.f, v + j0 * o.f, o.f, 0, dp.data(),
                  kKeyBlock);
          for (int64_t i = 0; i < bq; ++i)
            for (int64_t j = 0; j < bk; ++j) {
              const int64_t at = i * kKeyBlock + j;
              dp[at] = p[at] * (dp[at] - delta[i]);
            }
          gemm<T>(false, false, bq, o.e, bk, scale, dp.data(), kKeyBlock, k + j0 * o.e, o.e, 1,
                  dq + i0 * o.e, o.e);
          gemm<T>(true, false, bk, o.e, bq, scale, dp.data(), kKeyBlock, q + i0 * o.e, o.e, 1,
                  dk + j0 * o.e, o.e);
        }
      }
    }
  });
  return grads;
}

/// The CPU computes; CUDA tensors go there and back (no CUDA attention kernel yet).
Tensor on_cpu(const Tensor& x) {
  return !x.defined() || x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
}

}  // namespace

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                         double scale, DType dtype) {
  const Device device = q.device();
  Tensor out = dtype == DType::f64
                   ? forward<double>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias), scale)
                   : forward<float>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias), scale);
  if (out.dtype() != dtype) out = out.to(dtype);
  return device.kind == DeviceKind::cpu ? out : out.to(device);
}

Tensor attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                          const Tensor& out, const Tensor& d_out, double scale, DType dtype) {
  const Device device = q.device();
  Tensor g = dtype == DType::f64 ? backward<double>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias),
                                                    on_cpu(out), on_cpu(d_out), scale)
                                 : backward<float>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias),
                                                   on_cpu(out), on_cpu(d_out), scale);
  if (g.dtype() != dtype) g = g.to(dtype);
  return device.kind == DeviceKind::cpu ? g : g.to(device);
}

}  // namespace ein
