// FlashAttention-2 on the CPU (attention.h). Per batch index n the operands are row-major
// matrices: q [T, E], k [S, E], v [S, F]; the bias is read through its strides. Tiles are Bq
// query rows × Bk keys: the logits tile is one GEMM (scale folded into alpha), the bias is
// added, and the probabilities tile goes into a second GEMM. exp runs vectorised (a
// polynomial compiled for AVX-512, AVX2 and the baseline, picked at load time). Tiles the
// bias masks entirely are skipped, and a tile stops at the last key column some row of it
// leaves unmasked (TileInfo): a causal mask's diagonal tiles do about half the work.
#include "exec/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/attention_cuda.h"
#include "exec/vector_math.h"
#include "runtime/blas/gemm.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 128;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// row[j] += bias[j] (stride `bs`), -inf masking whatever row[j] is.
template <class T>
void add_bias(T* row, const T* bias, int64_t n, int64_t bs) {
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  if (bs == 1) {
    for (int64_t j = 0; j < n; ++j) row[j] = bias[j] == minus_inf ? minus_inf : row[j] + bias[j];
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T b = bias[j * bs];
    row[j] = b == minus_inf ? minus_inf : row[j] + b;
  }
}

template <class T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

/// One GEMM on the calling thread: C = alpha·op(A)·op(B) + beta·C.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  gemm_tile(dtype_of<T>(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// x as a contiguous CPU tensor of dtype `dt` (x itself when it is one).
Tensor dense(const Tensor& x, DType dt) {
  Tensor y = x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
  if (y.dtype() != dt) y = y.to(dt);
  return y.is_contiguous() ? y : y.contiguous();
}

/// What a tile of the bias asks for: nothing (every logit masked: skip the tile), no bias
/// (all zeros), or adding it.
enum class Tile : uint8_t { skip, plain, biased };

/// A tile's kind and the key column `end` past which every one of its logits is masked: the
/// tile is computed over keys [j0, end) only (a causal mask's diagonal tiles shrink to the
/// part left of the diagonal; the columns cut off have probability exactly 0).
struct TileInfo {
  Tile kind = Tile::plain;
  int64_t end = 0;
};

template <class T>
TileInfo tile_info(const T* bias, int64_t bt, int64_t bs, int64_t i0, int64_t i1, int64_t j0,
                   int64_t j1) {
  if (bias == nullptr) return {Tile::plain, j1};
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  bool zero = true;
  int64_t end = j0;  // one past the last column some row leaves unmasked
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = j0; j < j1; ++j) {
      const T b = bias[i * bt + j * bs];
      if (b != minus_inf) end = std::max(end, j + 1);
      zero = zero && b == 0;
    }
  if (end == j0) return {Tile::skip, j0};
  return {zero ? Tile::plain : Tile::biased, end};
}

/// The tiles of one batch row's bias, row-major over (query block, key block).
template <class T>
std::vector<TileInfo> tile_infos(const T* bias, int64_t bt, int64_t bs, int64_t t, int64_t s) {
  std::vector<TileInfo> tiles;
  for (int64_t i0 = 0; i0 < t; i0 += kQueryBlock)
    for (int64_t j0 = 0; j0 < s; j0 += kKeyBlock)
      tiles.push_back(tile_info(bias, bt, bs, i0, std::min(t, i0 + kQueryBlock), j0,
                                std::min(s, j0 + kKeyBlock)));
  return tiles;
}

/// One operand as batch × row-major matrices: read in place when it is a CPU tensor of T with
/// unit column stride (a permuted or sliced view of a projection's output is), else copied.
template <class T>
struct Matrices {
  Tensor held;                      ///< keeps the memory alive
  const T* base = nullptr;
  std::vector<int64_t> batch_shape, batch_strides;
  int64_t ld = 0;                   ///< row stride

  Matrices() = default;
  explicit Matrices(const Tensor& x) {
    const DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
    held = x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
    if (held.dtype() != dt) held = held.to(dt);
    const int64_t r = held.dim();
    if (held.size(r - 1) > 1 && held.stride(r - 1) != 1) held = held.contiguous();
    for (int64_t d = 0; d + 2 < r; ++d) {
      batch_shape.push_back(held.size(d));
      batch_strides.push_back(held.stride(d));
    }
    ld = held.size(r - 2) > 1 ? held.stride(r - 2) : std::max<int64_t>(held.size(r - 1), 1);
    if (ld < held.size(r - 1)) {  // rows overlap (a broadcast row): copy
      held = held.contiguous();
      ld = std::max<int64_t>(held.size(r - 1), 1);
      for (int64_t d = 0; d + 2 < r; ++d) batch_strides[d] = held.stride(d);
    }
    base = held.numel() > 0 ? held.template data<T>() : nullptr;
  }

  /// Batch index n's matrix (null when the operand is empty).
  const T* at(int64_t index) const {
    if (base == nullptr) return nullptr;
    int64_t offset = 0;
    for (size_t d = batch_shape.size(); d-- > 0;) {
      offset += (index % batch_shape[d]) * batch_strides[d];
      index /= batch_shape[d];
    }
    return base + offset;
  }
};

/// The operands and their sizes: n batch rows, t queries, s keys, e per q/k row, f per v row.
template <class T>
struct Operands {
  Matrices<T> q, k, v, bias;
  bool has_bias = false;
  int64_t n = 1, t = 0, s = 0, e = 0, f = 0;
  int64_t bias_s = 1;  ///< the bias's stride along s (its ld is the stride along t)
  /// Grouped-query heads: q's last batch dim has `heads` heads, k's and v's `groups`;
  /// query head h reads group h / repeat. n_kv counts k's and v's batch rows.
  int64_t repeat = 1, heads = 1, groups = 1, n_kv = 1;

  Operands(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in,
           int64_t kv_repeat) {
    const int64_t r = q_in.dim();
    if (r < 2 || k_in.dim() != r || v_in.dim() != r)
      throw std::logic_error("internal error: attention operands of different ranks");
    for (int64_t d = 0; d + 2 < r; ++d) n *= q_in.size(d);
    repeat = std::max<int64_t>(1, kv_repeat);
    heads = r > 2 ? q_in.size(r - 3) : 1;
    groups = heads / repeat;
    n_kv = repeat > 1 ? n / repeat : n;
    t = q_in.size(r - 2);
    e = q_in.size(r - 1);
    s = k_in.size(r - 2);
    f = v_in.size(r - 1);
    if (n == 0 || t == 0) return;
    q = Matrices<T>(q_in);
    if (s > 0) {
      k = Matrices<T>(k_in);
      v = Matrices<T>(v_in);
    }
    if (bias_in.defined() && s > 0) {
      // The bias is read element by element: any strides, broadcasts included.
      has_bias = true;
      Tensor b = bias_in.device().kind == DeviceKind::cpu ? bias_in : bias_in.to(cpu());
      const DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
      if (b.dtype() != dt) b = b.to(dt);
      bias.held = b;
      bias.base = b.template data<T>();
      for (int64_t d = 0; d + 2 < r; ++d) {
        bias.batch_shape.push_back(b.size(d));
        bias.batch_strides.push_back(b.stride(d));
      }
      bias.ld = b.stride(r - 2);
      bias_s = b.stride(r - 1);
    }
  }

  /// Batch n's bias (null without one).
  const T* bias_at(int64_t index) const { return has_bias ? bias.at(index) : nullptr; }
  /// The k/v batch row query batch row `index` reads.
  int64_t kv_row(int64_t index) const {
    return repeat == 1 ? index : (index / heads) * groups + (index % heads) / repeat;
  }

  /// The tiles every batch row shares when the bias does not vary over the batch (a causal
  /// mask broadcast to every head): classified once per call, not once per row.
  std::vector<TileInfo> shared_tiles;
  bool shared = false;
  void classify_shared() {
    shared = !has_bias || std::all_of(bias.batch_strides.begin(), bias.batch_strides.end(),
                                      [](int64_t x) { return x == 0; });
    if (shared && n > 0 && t > 0) shared_tiles = tile_infos(bias_at(0), bias.ld, bias_s, t, s);
  }
  /// Batch row n's tiles: the shared ones, or its own in `scratch`.
  const std::vector<TileInfo>& tiles(int64_t index, std::vector<TileInfo>& scratch) const {
    if (shared) return shared_tiles;
    scratch = tile_infos(bias_at(index), bias.ld, bias_s, t, s);
    return scratch;
  }
};

/// The logits tile: scale · q[i0:i1] k[j0:j1]ᵀ + bias, into `tile` (row stride bk).
template <class T>
void logits_tile(const T* q, const T* k, const T* bias, const Operands<T>& o, double scale,
                 int64_t i0, int64_t i1, int64_t j0, int64_t j1, T* tile, int64_t bk, Tile kind) {
  gemm<T>(false, true, i1 - i0, j1 - j0, o.e, scale, q + i0 * o.q.ld, o.q.ld, k + j0 * o.k.ld,
          o.k.ld, 0, tile, bk);
  if (kind != Tile::biased) return;
  for (int64_t i = i0; i < i1; ++i)
    add_bias(tile + (i - i0) * bk, bias + i * o.bias.ld + j0 * o.bias_s, j1 - j0, o.bias_s);
}

template <class T>
Tensor forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& bias_in,
               double scale, int64_t kv_repeat) {
  Operands<T> o(q_in, k_in, v_in, bias_in, kv_repeat);
  o.classify_shared();
  Shape out_shape = q_in.shape();
  out_shape.back() = o.f + 1;
  Tensor out = empty(out_shape, dtype_of<T>(), cpu());
  T* out_data = out.data<T>();
  const int64_t q_blocks = (o.t + kQueryBlock - 1) / kQueryBlock;
  const int64_t width = o.f + 1;
  parallel_for(0, o.n * q_blocks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> tile(kQueryBlock * kKeyBlock), acc(kQueryBlock * std::max<int64_t>(o.f, 1)),
        m(kQueryBlock), l(kQueryBlock);
    std::vector<TileInfo> scratch;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / q_blocks, i0 = (task % q_blocks) * kQueryBlock,
                    i1 = std::min(o.t, i0 + kQueryBlock), bq = i1 - i0;
      const T* q = o.q.at(n);
      const T* k = o.s > 0 ? o.k.at(o.kv_row(n)) : nullptr;
      const T* v = o.s > 0 ? o.v.at(o.kv_row(n)) : nullptr;
      const T* bias = o.bias_at(n);
      const std::vector<TileInfo>& tiles = o.tiles(n, scratch);
      const int64_t k_blocks = (o.s + kKeyBlock - 1) / kKeyBlock;
      std::fill(m.begin(), m.end(), static_cast<T>(-kInf));
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t j0 = 0; j0 < o.s; j0 += kKeyBlock) {
        const TileInfo& info = tiles[(i0 / kQueryBlock) * k_blocks + j0 / kKeyBlock];
        if (info.kind == Tile::skip) continue;
        const int64_t j1 = info.end, bk = j1 - j0;
        logits_tile(q, k, bias, o, scale, i0, i1, j0, j1, tile.data(), kKeyBlock, info.kind);
        for (int64_t i = 0; i < bq; ++i) {
          T* row = tile.data() + i * kKeyBlock;
          const T mx = row_max(row, bk, m[i]);
          const T shift = std::isinf(mx) && mx < 0 ? T(0) : mx;
          const T sum = exp_shift_sum(row, bk, shift);
          const T correction = std::exp(m[i] - shift);
          l[i] = l[i] * correction + sum;
          m[i] = mx;
          if (correction != T(1))
            for (int64_t c = 0; c < o.f; ++c) acc[i * o.f + c] *= correction;
        }
        gemm<T>(false, false, bq, o.f, bk, 1, tile.data(), kKeyBlock, v + j0 * o.v.ld, o.v.ld, 1,
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
                const Tensor& out_in, const Tensor& d_in, double scale, int64_t kv_repeat) {
  Operands<T> o(q_in, k_in, v_in, bias_in, kv_repeat);
  o.classify_shared();
  const Tensor out = dense(out_in, dtype_of<T>());
  const Tensor d_out = dense(d_in, dtype_of<T>());
  const int64_t width = o.f + 1, te = o.t * o.e, se = o.s * o.e, sf = o.s * o.f;
  // dq of every query row, then dk and dv of every k/v row (graph.h's attention_grad).
  Tensor grads = zeros({o.n * te + o.n_kv * (se + sf)}, dtype_of<T>(), cpu());
  T* g_data = grads.data<T>();
  // Parallel over k/v rows: the query heads of a group run on one thread, one after another,
  // so each dk and dv is written by one thread only.
  parallel_for(0, o.n_kv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> p(kQueryBlock * kKeyBlock), dp(kQueryBlock * kKeyBlock),
        d_o(kQueryBlock * std::max<int64_t>(o.f, 1)), delta(kQueryBlock), lse(kQueryBlock);
    std::vector<TileInfo> scratch;
    for (int64_t row = lo; row < hi; ++row)
    for (int64_t r = 0; r < o.repeat; ++r) {
      const int64_t n =
          o.repeat == 1 ? row : (row / o.groups) * o.heads + (row % o.groups) * o.repeat + r;
      const T* q = o.q.at(n);
      const T* k = o.s > 0 ? o.k.at(row) : nullptr;
      const T* v = o.s > 0 ? o.v.at(row) : nullptr;
      const T* bias = o.bias_at(n);
      const std::vector<TileInfo>& tiles = o.tiles(n, scratch);
      const int64_t k_blocks = (o.s + kKeyBlock - 1) / kKeyBlock;
      T* dq = g_data + n * te;
      T* dk = g_data + o.n * te + row * se;
      T* dv = g_data + o.n * te + o.n_kv * se + row * sf;
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
          const TileInfo& info = tiles[(i0 / kQueryBlock) * k_blocks + j0 / kKeyBlock];
          if (info.kind == Tile::skip) continue;
          const int64_t j1 = info.end, bk = j1 - j0;
          logits_tile(q, k, bias, o, scale, i0, i1, j0, j1, p.data(), kKeyBlock, info.kind);
          for (int64_t i = 0; i < bq; ++i) {
            const T shift = std::isinf(lse[i]) && lse[i] < 0 ? T(0) : lse[i];
            exp_shift_sum(p.data() + i * kKeyBlock, bk, shift);
          }
          // dV_j += Pᵀ dO_i;  dP = dO_i V_jᵀ;  dS = P ∘ (dP − δ);  dQ_i += s·dS K_j;
          // dK_j += s·dSᵀ Q_i.
          gemm<T>(true, false, bk, o.f, bq, 1, p.data(), kKeyBlock, d_o.data(), o.f, 1,
                  dv + j0 * o.f, o.f);
          gemm<T>(false, true, bq, bk, o.f, 1, d_o.data(), o.f, v + j0 * o.v.ld, o.v.ld, 0,
                  dp.data(), kKeyBlock);
          for (int64_t i = 0; i < bq; ++i)
            for (int64_t j = 0; j < bk; ++j) {
              const int64_t at = i * kKeyBlock + j;
              dp[at] = p[at] * (dp[at] - delta[i]);
            }
          gemm<T>(false, false, bq, o.e, bk, scale, dp.data(), kKeyBlock, k + j0 * o.k.ld, o.k.ld,
                  1, dq + i0 * o.e, o.e);
          gemm<T>(true, false, bk, o.e, bq, scale, dp.data(), kKeyBlock, q + i0 * o.q.ld, o.q.ld,
                  1, dk + j0 * o.e, o.e);
        }
      }
    }
  });
  return grads;
}

/// The CPU computes; CUDA tensors whose head dims are too wide for the CUDA kernels' shared
/// memory go there and back.
Tensor on_cpu(const Tensor& x) {
  return !x.defined() || x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
}

/// Whether the CUDA kernels (attention_cuda.h) take these operands.
bool on_the_gpu(const Tensor& q, const Tensor& v, DType dtype) {
  return q.device().kind == DeviceKind::cuda && q.dim() >= 2 &&
         cuda_attention_fits(q.size(-1), v.size(-1), dtype == DType::f64 ? DType::f64 : DType::f32);
}

}  // namespace

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                         double scale, DType dtype, int64_t kv_repeat) {
  if (on_the_gpu(q, v, dtype))
    return attention_forward_cuda(q, k, v, bias, scale, dtype, kv_repeat);
  const Device device = q.device();
  Tensor out =
      dtype == DType::f64
          ? forward<double>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias), scale, kv_repeat)
          : forward<float>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias), scale, kv_repeat);
  if (out.dtype() != dtype) out = out.to(dtype);
  return device.kind == DeviceKind::cpu ? out : out.to(device);
}

Tensor attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                          const Tensor& out, const Tensor& d_out, double scale, DType dtype,
                          int64_t kv_repeat) {
  if (on_the_gpu(q, v, dtype))
    return attention_backward_cuda(q, k, v, bias, out, d_out, scale, dtype, kv_repeat);
  const Device device = q.device();
  Tensor g = dtype == DType::f64
                 ? backward<double>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias), on_cpu(out),
                                    on_cpu(d_out), scale, kv_repeat)
                 : backward<float>(on_cpu(q), on_cpu(k), on_cpu(v), on_cpu(bias), on_cpu(out),
                                   on_cpu(d_out), scale, kv_repeat);
  if (g.dtype() != dtype) g = g.to(dtype);
  return device.kind == DeviceKind::cpu ? g : g.to(device);
}

}  // namespace ein
