// FlashAttention-2 on the CPU (attention.h). Per batch index n the operands are row-major
// matrices: q [T, E], k [S, E], v [S, F]; the bias is read through its strides. Tiles are Bq
// query rows × Bk keys: the logits tile is one product with kᵀ (scale folded in, kᵀ and vᵀ
// transposed once per batch row), the softmax step runs on it a block of rows at a time
// (softmax_tiles.h), and the probabilities tile goes into a second product; the tile products
// are tile_gemm.h's. Tiles the bias masks entirely are skipped, and a tile stops at the last
// key column some row of it leaves unmasked (TileInfo): a causal mask's diagonal tiles do
// about half the work. A bias of zeros then -inf in every row (causal, padding) is never read
// by the tiles: it becomes one key limit per query row (Mask). Only the keys some row of a
// batch row reads are staged (Mask::keys). One query row per batch row (a decode step's)
// runs attention_query.h's kernel instead, which reads the keys in place; bf16 q, k and v on
// a CPU with AMX or AVX512-BF16 run attention_amx.h's kernels, the same loops with bf16 tile
// products.
#include "exec/attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/attention_amx.h"
#include "exec/attention_cuda.h"
#include "exec/attention_operands.h"
#include "exec/attention_query.h"
#include "exec/softmax_tiles.h"
#include "exec/tile_gemm.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

using namespace attention_detail;

/// x's s rows of `width` values (row stride ld) transposed block by block: key block b is
/// `width` rows of kKeyBlock keys at dst + b·width·kKeyBlock. A product with xᵀ then reads
/// rows 512 bytes apart (rows s apart would fall into a handful of L1 sets).
template <class T>
void pack_transposed(const T* x, int64_t ld, int64_t s, int64_t width, std::vector<T>& dst) {
  dst.resize(static_cast<size_t>((s + kKeyBlock - 1) / kKeyBlock * kKeyBlock * width));
  for (int64_t j0 = 0; j0 < s; j0 += kKeyBlock)
    transpose_into(x + j0 * ld, ld, std::min(kKeyBlock, s - j0), width,
                   dst.data() + j0 * width, kKeyBlock);
}

/// Key block j0's part of a pack_transposed operand.
template <class T>
const T* packed_block(const std::vector<T>& packed, int64_t j0, int64_t width) {
  return packed.data() + j0 * width;
}

/// The logits tile: scale · q[i0:i1] k[j0:j1]ᵀ + bias, into `tile` (row stride bk); `kt` is
/// k packed by pack_transposed, so the product reads both operands row by row.
template <class T>
void logits_tile(Rows<T> q, const std::vector<T>& kt, const T* bias, const Operands<T>& o,
                 double scale, int64_t i0, int64_t i1, int64_t j0, int64_t j1, T* tile, int64_t bk,
                 Tile kind) {
  tile_gemm(i1 - i0, j1 - j0, o.e, static_cast<T>(scale), q.data, q.ld, 1,
            packed_block(kt, j0, o.e), kKeyBlock, false, tile, bk);
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
  if constexpr (std::is_same_v<T, float>) {
    if (o.t == 1 && o.s > 0) return forward_one_query(o, scale, out_shape);
    if (amx_operands(o)) return forward_amx(o, scale, out_shape);
  }
  Tensor out = empty(out_shape, dtype_of<T>(), cpu());
  T* out_data = out.data<T>();
  const int64_t q_blocks = (o.t + kQueryBlock - 1) / kQueryBlock;
  const int64_t width = o.f + 1;
  // Tasks are (batch row, query block); whole batch rows per task when there are enough rows
  // for the threads, so that each stages (transposes, widens) its k and v once.
  const int64_t per_task = o.n >= 4 * num_threads() ? q_blocks : 1;
  parallel_for(0, o.n * q_blocks / per_task, 1, [&](int64_t first, int64_t last) {
    const int64_t lo = first * per_task, hi = last * per_task;
    std::vector<T> tile(kQueryBlock * kKeyBlock), acc(kQueryBlock * std::max<int64_t>(o.f, 1)),
        m(kQueryBlock), l(kQueryBlock), kt, q_rows, k_rows, v_rows;
    std::vector<int64_t> cols(kQueryBlock);
    typename Operands<T>::MaskCache scratch;
    int64_t packed = -1;  // the k/v row whose k is in kt (and v in v_rows, when widened)
    int64_t packed_keys = 0;  // how many of its keys: those the mask leaves some row
    Rows<T> v;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / q_blocks, i0 = (task % q_blocks) * kQueryBlock,
                    i1 = std::min(o.t, i0 + kQueryBlock), bq = i1 - i0;
      const Rows<T> q = o.q.rows(n, i0, bq, q_rows);
      const T* bias = o.bias_at(n);
      const Mask& mask = o.mask(n, scratch);
      if (mask.keys > 0 && (o.kv_row(n) != packed || mask.keys > packed_keys)) {
        const Rows<T> k = o.k.rows(o.kv_row(n), 0, mask.keys, k_rows);
        pack_transposed(k.data, k.ld, mask.keys, o.e, kt);
        v = o.v.rows(o.kv_row(n), 0, mask.keys, v_rows);
        packed = o.kv_row(n);
        packed_keys = mask.keys;
      }
      std::fill(m.begin(), m.end(), static_cast<T>(-kInf));
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t j0 = 0; j0 < o.s; j0 += kKeyBlock) {
        const TileInfo& info = mask.tile(i0, j0, o.s);
        if (info.kind == Tile::skip) continue;
        const int64_t j1 = info.end, bk = j1 - j0;
        logits_tile(q, kt, bias, o, scale, i0, i1, j0, j1, tile.data(), kKeyBlock,
                    info.kind);
        if (info.kind == Tile::limited) tile_columns(mask, i0, bq, j0, bk, cols);
        online_softmax_block(tile.data(), kKeyBlock, bq, bk,
                             info.kind == Tile::limited ? cols.data() : nullptr, m.data(),
                             l.data(), acc.data(), o.f);
        tile_gemm(bq, o.f, bk, T(1), tile.data(), kKeyBlock, 1, v.data + j0 * v.ld, v.ld, true,
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
  if constexpr (std::is_same_v<T, float>)
    if (amx_operands(o)) return backward_amx(o, out_in, d_in, scale);
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
        d_o(kQueryBlock * std::max<int64_t>(o.f, 1)), delta(kQueryBlock), lse(kQueryBlock),
        kt, vt, q_rows, k_rows, v_rows;
    std::vector<int64_t> cols(kQueryBlock);
    typename Operands<T>::MaskCache scratch;
    Rows<T> k;
    for (int64_t row = lo; row < hi; ++row)
    for (int64_t r = 0; r < o.repeat; ++r) {
      if (r == 0 && o.s > 0 && o.t > 0) {  // k and v transposed: for the logits, dP = dO·vᵀ
        k = o.k.rows(row, 0, o.s, k_rows);
        pack_transposed(k.data, k.ld, o.s, o.e, kt);
        const Rows<T> v = o.v.rows(row, 0, o.s, v_rows);
        pack_transposed(v.data, v.ld, o.s, o.f, vt);
      }
      const int64_t n =
          o.repeat == 1 ? row : (row / o.groups) * o.heads + (row % o.groups) * o.repeat + r;
      const Rows<T> q = o.q.rows(n, 0, o.t, q_rows);
      const T* bias = o.bias_at(n);
      const Mask& mask = o.mask(n, scratch);
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
          const TileInfo& info = mask.tile(i0, j0, o.s);
          if (info.kind == Tile::skip) continue;
          const int64_t j1 = info.end, bk = j1 - j0;
          logits_tile(Rows<T>{q.data + i0 * q.ld, q.ld}, kt, bias, o, scale, i0, i1, j0, j1,
                      p.data(), kKeyBlock, info.kind);
          if (info.kind == Tile::limited) tile_columns(mask, i0, bq, j0, bk, cols);
          probabilities_block(p.data(), kKeyBlock, bq, bk,
                              info.kind == Tile::limited ? cols.data() : nullptr, lse.data());
          // dV_j += Pᵀ dO_i;  dP = dO_i V_jᵀ;  dS = P ∘ (dP − δ);  dQ_i += s·dS K_j;
          // dK_j += s·dSᵀ Q_i.
          tile_gemm(bk, o.f, bq, T(1), p.data(), 1, kKeyBlock, d_o.data(), o.f, true,
                    dv + j0 * o.f, o.f);
          tile_gemm(bq, bk, o.f, T(1), d_o.data(), o.f, 1, packed_block(vt, j0, o.f), kKeyBlock,
                    false, dp.data(), kKeyBlock);
          for (int64_t i = 0; i < bq; ++i)
            for (int64_t j = 0; j < bk; ++j) {
              const int64_t at = i * kKeyBlock + j;
              dp[at] = p[at] * (dp[at] - delta[i]);
            }
          tile_gemm(bq, o.e, bk, static_cast<T>(scale), dp.data(), kKeyBlock, 1, k.data + j0 * k.ld,
                    k.ld, true, dq + i0 * o.e, o.e);
          tile_gemm(bk, o.e, bq, static_cast<T>(scale), dp.data(), 1, kKeyBlock, q.data + i0 * q.ld,
                    q.ld, true, dk + j0 * o.e, o.e);
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
