// FlashAttention-2 with bf16 tile products, AMX or AVX512-BF16 (attention_amx.h). The loops
// are attention.cpp's; what differs is how the operands are laid out for the tiles
// (amx_tiles.h):
//  - once per k/v batch row: kᵀ and vᵀ as pairs per key block (the logits' and dP's B), v and
//    k as pairs along the keys (the forward's P·V and the backward's dS·K);
//  - once per query batch row in the backward: q's and dO's rows (A of the logits and of
//    dP) and their transposes (A of dKᵀ += qᵀ·dS and dVᵀ += dOᵀ·P), so that P and dS go into
//    the products as pairs of rows and never need transposing;
//  - per tile: P (forward: A rows; backward: pairs along the queries) and dS (A rows for dQ,
//    pairs for dKᵀ), rounded to bf16. dK and dV are accumulated transposed, per key block,
//    and transposed once per k/v row at the end.
// The scale multiplies the f32 logits after their product and is folded into dS's rounding.
#include "exec/attention_amx.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "exec/amx_tiles.h"
#include "exec/softmax_tiles.h"
#include "exec/tile_gemm.h"
#include "runtime/parallel.h"

namespace ein::attention_detail {
namespace {

/// Pairs layout of a key block of kᵀ or vᵀ: its pair-rows are 2·kKeyBlock elements apart.
constexpr int64_t kBlockLdb = 2 * kKeyBlock;

/// The padded sizes of a call: e and f to 32 (they are the shared dim of some product), the
/// keys to whole key blocks, the queries to 32.
struct Padded {
  int64_t e, f, key_blocks, s, t;
  explicit Padded(const Operands<float>& o)
      : e(round_up(o.e, 32)),
        f(round_up(o.f, 32)),
        key_blocks((o.s + kKeyBlock - 1) / kKeyBlock),
        s(key_blocks * kKeyBlock),
        t(round_up(o.t, 32)) {}
};

/// x (n × k bf16 rows, row stride ld) transposed into pairs, one key block after another:
/// block b holds rows [b·kKeyBlock, ...) of x as the columns of a k_pad × kKeyBlock B.
void pack_blocks_transposed(const uint16_t* x, int64_t ld, int64_t n, int64_t k, int64_t k_pad,
                            int64_t key_blocks, std::vector<uint16_t>& dst) {
  const int64_t block = (k_pad / 2) * kBlockLdb;
  dst.resize(static_cast<size_t>(key_blocks * block));
  for (int64_t b = 0; b < key_blocks; ++b) {
    const int64_t j0 = b * kKeyBlock;
    pairs_from_bf16_transposed(x + j0 * ld, ld, std::min(kKeyBlock, n - j0), k,
                               dst.data() + b * block, kBlockLdb, k_pad, kKeyBlock);
  }
}

/// What a thread keeps of its buffers between calls: up to this many bytes. Long sequences
/// need more (the backward's per-row buffers grow with t and s: about 17 MiB per thread at
/// t = s = 4096, e = f = 128); those are freed after the call rather than held by every
/// thread for the process' life.
constexpr size_t kKeptBytes = size_t{8} << 20;

/// The buffers' capacity in bytes.
template <class... V>
size_t capacity_bytes(const V&... v) {
  return ((v.capacity() * sizeof(typename V::value_type)) + ...);
}

/// A thread's buffers, kept from call to call (fresh ones cost a page fault per 4 KiB). The
/// forward's: kᵀ as pairs per key block, v as pairs along the keys, a block of q's rows, P's
/// rows, the logits tile and the output accumulator.
struct ForwardBuffers {
  std::vector<uint16_t> kt, vp, qa, pa;
  std::vector<float> tile, acc;

  void size_for(const Padded& pad) {
    vp.resize(static_cast<size_t>(pad.s * pad.f));
    qa.resize(static_cast<size_t>(kQueryBlock * pad.e));
    pa.resize(kQueryBlock * kKeyBlock);
    tile.resize(kQueryBlock * kKeyBlock);
    acc.resize(static_cast<size_t>(kQueryBlock * pad.f));
  }
  size_t bytes() const { return capacity_bytes(kt, vp, qa, pa, tile, acc); }
};
/// Per k/v row: kᵀ, vᵀ (pairs per key block), k (pairs along the keys), and dKᵀ, dVᵀ per key
/// block (e or f rows × kKeyBlock). Per query row: q's and dO's rows (qa, da), their
/// transposes (qt, dt; through `wide`, in f32), dQ. Per tile: P, dP, and the pairs of P and
/// dS and the A rows of dS.
struct BackwardBuffers {
  std::vector<uint16_t> kt, vt, kp, qa, qt, da, dt, pp, sa, sp;
  std::vector<float> p, dp, dq, dkt, dvt, wide, q_rows;

  void size_for(const Padded& pad, const Operands<float>& o) {
    const auto sized = [](auto& v, int64_t n) { v.resize(static_cast<size_t>(n)); };
    sized(kp, pad.s * pad.e);
    sized(qa, pad.t * pad.e);
    sized(qt, pad.e * pad.t);
    sized(da, pad.t * pad.f);
    sized(dt, pad.f * pad.t);
    sized(pp, (kQueryBlock / 2) * kBlockLdb);
    sized(sp, (kQueryBlock / 2) * kBlockLdb);
    sized(sa, kQueryBlock * kKeyBlock);
    sized(p, kQueryBlock * kKeyBlock);
    sized(dp, kQueryBlock * kKeyBlock);
    sized(dq, pad.t * pad.e);
    sized(dkt, pad.key_blocks * pad.e * kKeyBlock);
    sized(dvt, pad.key_blocks * pad.f * kKeyBlock);
    sized(wide, std::max(o.e, o.f) * pad.t);
  }
  size_t bytes() const {
    return capacity_bytes(kt, vt, kp, qa, qt, da, dt, pp, sa, sp, p, dp, dq, dkt, dvt, wide, q_rows);
  }
};

/// Frees a thread's buffers when they hold more than `limit` bytes.
template <class Buffers>
void keep_at_most(Buffers& w, size_t limit) {
  if (w.bytes() > limit) w = Buffers{};
}

/// The logits tile's finishing touches: the scale, and a bias that is not a key limit.
void finish_logits(float* tile, const Operands<float>& o, const float* bias, float scale,
                   int64_t i0, int64_t bq, int64_t j0, int64_t bk, Tile kind) {
  for (int64_t i = 0; i < bq; ++i) {
    float* row = tile + i * kKeyBlock;
    for (int64_t j = 0; j < bk; ++j) row[j] *= scale;
    if (kind == Tile::biased)
      add_bias(row, bias + (i0 + i) * o.bias.ld + j0 * o.bias_s, bk, o.bias_s);
  }
}

}  // namespace

bool amx_operands(const Operands<float>& o) {
  return o.q.base_bf16 != nullptr && o.k.base_bf16 != nullptr && o.v.base_bf16 != nullptr &&
         bf16_tiles();
}

Tensor forward_amx(const Operands<float>& o, double scale, const Shape& out_shape) {
  Tensor out = empty(out_shape, DType::f32, cpu());
  float* out_data = out.data<float>();
  const Padded pad(o);
  const int64_t q_blocks = (o.t + kQueryBlock - 1) / kQueryBlock, width = o.f + 1;
  const int64_t per_task = o.n >= 4 * num_threads() ? q_blocks : 1;
  parallel_for(0, o.n * q_blocks / per_task, 1, [&](int64_t first, int64_t last) {
    const int64_t lo = first * per_task, hi = last * per_task;
    thread_local ForwardBuffers buffers;
    ForwardBuffers& w = buffers;
    w.size_for(pad);
    std::vector<uint16_t> &kt = w.kt, &vp = w.vp, &qa = w.qa, &pa = w.pa;
    std::vector<float> &tile = w.tile, &acc = w.acc;
    std::vector<float> m(kQueryBlock), l(kQueryBlock);
    std::vector<int64_t> cols(kQueryBlock);
    Operands<float>::MaskCache scratch;
    int64_t packed = -1;      // the k/v row in kt and vp
    int64_t packed_keys = 0;  // how many of its keys: those the mask leaves some row
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / q_blocks, i0 = (task % q_blocks) * kQueryBlock,
                    bq = std::min(o.t, i0 + kQueryBlock) - i0, bq16 = round_up(bq, 16);
      const float* bias = o.bias_at(n);
      const Mask& mask = o.mask(n, scratch);
      if (mask.keys > 0 && (o.kv_row(n) != packed || mask.keys > packed_keys)) {
        packed = o.kv_row(n);
        packed_keys = mask.keys;
        const int64_t blocks = (mask.keys + kKeyBlock - 1) / kKeyBlock;
        pack_blocks_transposed(o.k.bf16_at(packed), o.k.ld, mask.keys, o.e, pad.e, blocks, kt);
        pairs_from_bf16(o.v.bf16_at(packed), o.v.ld, mask.keys, o.f, vp.data(), 2 * pad.f,
                        blocks * kKeyBlock, pad.f);
      }
      a_from_bf16(o.q.bf16_at(n) + i0 * o.q.ld, o.q.ld, bq, o.e, qa.data(), pad.e, bq16, pad.e);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j0 = 0; j0 < o.s; j0 += kKeyBlock) {
        const TileInfo& info = mask.tile(i0, j0, o.s);
        if (info.kind == Tile::skip) continue;
        const int64_t bk = info.end - j0;
        const uint16_t* k_block = kt.data() + (j0 / kKeyBlock) * (pad.e / 2) * kBlockLdb;
        bf16_tile_gemm(bq16, round_up(bk, 16), pad.e, qa.data(), pad.e, k_block, kBlockLdb, false,
                       tile.data(), kKeyBlock);
        finish_logits(tile.data(), o, bias, static_cast<float>(scale), i0, bq, j0, bk, info.kind);
        if (info.kind == Tile::limited) tile_columns(mask, i0, bq, j0, bk, cols);
        online_softmax_block(tile.data(), kKeyBlock, bq, bk,
                             info.kind == Tile::limited ? cols.data() : nullptr, m.data(),
                             l.data(), acc.data(), pad.f);
        const int64_t bk32 = round_up(bk, 32);
        a_from_f32(tile.data(), kKeyBlock, bq, bk, 1.0f, pa.data(), kKeyBlock, bq16, bk32);
        bf16_tile_gemm(bq16, pad.f, bk32, pa.data(), kKeyBlock, vp.data() + j0 * pad.f, 2 * pad.f,
                       true, acc.data(), pad.f);
      }
      for (int64_t i = 0; i < bq; ++i) {
        float* dst = out_data + (n * o.t + i0 + i) * width;
        const float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
        for (int64_t c = 0; c < o.f; ++c) dst[c] = acc[i * pad.f + c] * inv;
        dst[o.f] = l[i] > 0 ? m[i] + std::log(l[i]) : -std::numeric_limits<float>::infinity();
      }
    }
    keep_at_most(w, kKeptBytes);
  });
  return out;
}

Tensor backward_amx(const Operands<float>& o, const Tensor& out_in, const Tensor& d_in,
                    double scale) {
  const Tensor out = dense(out_in, DType::f32);
  const Tensor d_out = dense(d_in, DType::f32);
  const Padded pad(o);
  const int64_t width = o.f + 1, te = o.t * o.e, se = o.s * o.e, sf = o.s * o.f;
  Tensor grads = zeros({o.n * te + o.n_kv * (se + sf)}, DType::f32, cpu());
  float* g_data = grads.data<float>();
  const float s = static_cast<float>(scale);
  parallel_for(0, o.n_kv, 1, [&](int64_t lo, int64_t hi) {
    thread_local BackwardBuffers buffers;
    BackwardBuffers& w = buffers;
    w.size_for(pad, o);
    std::vector<uint16_t> &kt = w.kt, &vt = w.vt, &kp = w.kp, &qa = w.qa, &qt = w.qt, &da = w.da,
                          &dt = w.dt, &pp = w.pp, &sa = w.sa, &sp = w.sp;
    std::vector<float> &p = w.p, &dp = w.dp, &dq = w.dq, &dkt = w.dkt, &dvt = w.dvt,
                       &wide = w.wide, &q_rows = w.q_rows;
    std::vector<float> delta(static_cast<size_t>(o.t)), lse(static_cast<size_t>(o.t));
    std::vector<int64_t> cols(kQueryBlock);
    Operands<float>::MaskCache scratch;
    for (int64_t row = lo; row < hi; ++row) {
      const uint16_t* k = o.k.bf16_at(row);
      pack_blocks_transposed(k, o.k.ld, o.s, o.e, pad.e, pad.key_blocks, kt);
      pack_blocks_transposed(o.v.bf16_at(row), o.v.ld, o.s, o.f, pad.f, pad.key_blocks, vt);
      pairs_from_bf16(k, o.k.ld, o.s, o.e, kp.data(), 2 * pad.e, pad.s, pad.e);
      std::fill(dkt.begin(), dkt.end(), 0.0f);
      std::fill(dvt.begin(), dvt.end(), 0.0f);
      for (int64_t r = 0; r < o.repeat; ++r) {
        const int64_t n =
            o.repeat == 1 ? row : (row / o.groups) * o.heads + (row % o.groups) * o.repeat + r;
        const uint16_t* q = o.q.bf16_at(n);
        const float* o_rows = out.data<float>() + n * o.t * width;
        const float* d_rows = d_out.data<float>() + n * o.t * width;
        // qᵀ and dOᵀ: transposed in f32 (q widened exactly), then rounded (q: exactly).
        a_from_bf16(q, o.q.ld, o.t, o.e, qa.data(), pad.e, pad.t, pad.e);
        const Rows<float> q_wide = o.q.rows(n, 0, o.t, q_rows);
        transpose_into(q_wide.data, q_wide.ld, o.t, o.e, wide.data(), pad.t);
        a_from_f32(wide.data(), pad.t, o.e, o.t, 1.0f, qt.data(), pad.t, pad.e, pad.t);
        a_from_f32(d_rows, width, o.t, o.f, 1.0f, da.data(), pad.f, pad.t, pad.f);
        transpose_into(d_rows, width, o.t, o.f, wide.data(), pad.t);
        a_from_f32(wide.data(), pad.t, o.f, o.t, 1.0f, dt.data(), pad.t, pad.f, pad.t);
        for (int64_t i = 0; i < o.t; ++i) {  // δ_i = Σ_c dO·O, and the row's logsumexp
          float dot = 0;
          for (int64_t c = 0; c < o.f; ++c) dot += d_rows[i * width + c] * o_rows[i * width + c];
          delta[i] = dot;
          lse[i] = o_rows[i * width + o.f];
        }
        std::fill(dq.begin(), dq.end(), 0.0f);
        const float* bias = o.bias_at(n);
        const Mask& mask = o.mask(n, scratch);
        for (int64_t i0 = 0; i0 < o.t; i0 += kQueryBlock) {
          const int64_t bq = std::min(o.t, i0 + kQueryBlock) - i0, bq16 = round_up(bq, 16),
                        bq32 = round_up(bq, 32);
          for (int64_t j0 = 0; j0 < o.s; j0 += kKeyBlock) {
            const TileInfo& info = mask.tile(i0, j0, o.s);
            if (info.kind == Tile::skip) continue;
            const int64_t b = j0 / kKeyBlock, bk = info.end - j0, bk16 = round_up(bk, 16),
                          bk32 = round_up(bk, 32);
            // P, from the logits and each row's logsumexp.
            bf16_tile_gemm(bq16, bk16, pad.e, qa.data() + i0 * pad.e, pad.e,
                           kt.data() + b * (pad.e / 2) * kBlockLdb, kBlockLdb, false, p.data(),
                           kKeyBlock);
            finish_logits(p.data(), o, bias, s, i0, bq, j0, bk, info.kind);
            if (info.kind == Tile::limited) tile_columns(mask, i0, bq, j0, bk, cols);
            probabilities_block(p.data(), kKeyBlock, bq, bk,
                                info.kind == Tile::limited ? cols.data() : nullptr,
                                lse.data() + i0);
            // dVᵀ += dOᵀ·P;  dP = dO·Vᵀ;  dS = s·P ∘ (dP − δ);  dQ += dS·K;  dKᵀ += qᵀ·dS.
            pairs_from_f32(p.data(), kKeyBlock, bq, bk, 1.0f, pp.data(), kBlockLdb, bq32, bk16);
            bf16_tile_gemm(pad.f, bk16, bq32, dt.data() + i0, pad.t, pp.data(), kBlockLdb, true,
                           dvt.data() + b * pad.f * kKeyBlock, kKeyBlock);
            bf16_tile_gemm(bq16, bk16, pad.f, da.data() + i0 * pad.f, pad.f,
                           vt.data() + b * (pad.f / 2) * kBlockLdb, kBlockLdb, false, dp.data(),
                           kKeyBlock);
            ds_operands(p.data(), dp.data(), kKeyBlock, delta.data() + i0, bq, bk, s, sa.data(),
                        kKeyBlock, sp.data(), kBlockLdb);
            bf16_tile_gemm(bq16, pad.e, bk32, sa.data(), kKeyBlock, kp.data() + j0 * pad.e,
                           2 * pad.e, true, dq.data() + i0 * pad.e, pad.e);
            bf16_tile_gemm(pad.e, bk16, bq32, qt.data() + i0, pad.t, sp.data(), kBlockLdb, true,
                           dkt.data() + b * pad.e * kKeyBlock, kKeyBlock);
          }
        }
        float* dq_out = g_data + n * te;
        for (int64_t i = 0; i < o.t; ++i)
          std::memcpy(dq_out + i * o.e, dq.data() + i * pad.e, static_cast<size_t>(o.e) * sizeof(float));
      }
      // dK and dV of the row, from their transposes kept per key block.
      float* dk = g_data + o.n * te + row * se;
      float* dv = g_data + o.n * te + o.n_kv * se + row * sf;
      for (int64_t b = 0; b < pad.key_blocks; ++b) {
        const int64_t j0 = b * kKeyBlock, keys = std::min(kKeyBlock, o.s - j0);
        transpose_into(dkt.data() + b * pad.e * kKeyBlock, kKeyBlock, o.e, keys, dk + j0 * o.e, o.e);
        transpose_into(dvt.data() + b * pad.f * kKeyBlock, kKeyBlock, o.f, keys, dv + j0 * o.f, o.f);
      }
    }
    keep_at_most(w, kKeptBytes);
  });
  return grads;
}

}  // namespace ein::attention_detail
