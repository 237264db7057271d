// FlashAttention-2 on the CPU (attention.h). Per batch index n the operands are row-major
// matrices: q [T, E], k [S, E], v [S, F]; the bias is read through its strides. Tiles are Bq
// query rows × Bk keys: the logits tile is one product with kᵀ (scale folded in, kᵀ and vᵀ
// transposed once per batch row), the softmax step runs on it a block of rows at a time
// (softmax_tiles.h), and the probabilities tile goes into a second product; the tile products
// are tile_gemm.h's. Tiles the bias masks entirely are skipped, and a tile stops at the last
// key column some row of it leaves unmasked (TileInfo): a causal mask's diagonal tiles do
// about half the work. A bias of zeros then -inf in every row (causal, padding) is never read
// by the tiles: it becomes one key limit per query row (Mask).
#include "exec/attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ein/errors.h>
#include <fmt/format.h>

#include "exec/attention_cuda.h"
#include "exec/softmax_tiles.h"
#include "exec/tile_gemm.h"
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

/// x as a contiguous CPU tensor of dtype `dt` (x itself when it is one).
Tensor dense(const Tensor& x, DType dt) {
  Tensor y = x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
  if (y.dtype() != dt) y = y.to(dt);
  return y.is_contiguous() ? y : y.contiguous();
}

/// What a tile of the bias asks for: nothing (every logit masked: skip the tile), no bias
/// (all zeros), keys cut off per row (Mask::limits), or adding it.
enum class Tile : uint8_t { skip, plain, limited, biased };

/// A tile's kind and the key column `end` past which every one of its logits is masked: the
/// tile is computed over keys [j0, end) only (a causal mask's diagonal tiles shrink to the
/// part left of the diagonal; the columns cut off have probability exactly 0).
struct TileInfo {
  Tile kind = Tile::plain;
  int64_t end = 0;
};

/// One batch row's bias as the tiles see it: the tiles row-major over (query block, key
/// block), and, when every row of the bias is zeros and then -inf (a causal or a padding
/// mask), where each query row's masked keys start. Then no tile reads the bias: the softmax
/// takes row i's first limits[i] keys and gives the rest probability 0.
struct Mask {
  std::vector<TileInfo> tiles;
  std::vector<int64_t> limits;  ///< per query row; empty when the bias has another form

  const TileInfo& tile(int64_t i0, int64_t j0, int64_t s) const {
    return tiles[(i0 / kQueryBlock) * ((s + kKeyBlock - 1) / kKeyBlock) + j0 / kKeyBlock];
  }
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

/// Per query row, the key where a bias of zeros then -inf starts masking; empty when some row
/// has another form (another value, or a zero after a -inf).
template <class T>
std::vector<int64_t> prefix_limits(const T* bias, int64_t bt, int64_t bs, int64_t t, int64_t s) {
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  std::vector<int64_t> limits(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    const T* row = bias + i * bt;
    int64_t j = 0;
    while (j < s && row[j * bs] == T(0)) ++j;
    limits[i] = j;
    for (; j < s; ++j)
      if (row[j * bs] != minus_inf) return {};
  }
  return limits;
}

template <class T>
Mask mask_of(const T* bias, int64_t bt, int64_t bs, int64_t t, int64_t s) {
  Mask mask;
  if (bias != nullptr) mask.limits = prefix_limits(bias, bt, bs, t, s);
  for (int64_t i0 = 0; i0 < t; i0 += kQueryBlock) {
    const int64_t i1 = std::min(t, i0 + kQueryBlock);
    for (int64_t j0 = 0; j0 < s; j0 += kKeyBlock) {
      const int64_t j1 = std::min(s, j0 + kKeyBlock);
      if (mask.limits.empty()) {
        mask.tiles.push_back(tile_info(bias, bt, bs, i0, i1, j0, j1));
        continue;
      }
      int64_t end = j0;
      bool whole = true;
      for (int64_t i = i0; i < i1; ++i) {
        end = std::max(end, std::min(j1, mask.limits[i]));
        whole = whole && mask.limits[i] >= j1;
      }
      mask.tiles.push_back({end == j0 ? Tile::skip : whole ? Tile::plain : Tile::limited, end});
    }
  }
  return mask;
}

/// Rows of one operand's matrix as the tiles read them: `data` row-major with row stride ld.
template <class T>
struct Rows {
  const T* data = nullptr;
  int64_t ld = 0;
};

/// One operand as batch × row-major matrices: read in place when it is a CPU tensor of T with
/// unit column stride (a permuted or sliced view of a projection's output is), else copied. A
/// bf16 operand of the f32 kernel stays bf16: rows() widens the rows a thread is about to use
/// into its own buffer, instead of a widened copy of the whole tensor per call.
template <class T>
struct Matrices {
  Tensor held;                      ///< keeps the memory alive
  const T* base = nullptr;
  const uint16_t* base_bf16 = nullptr;  ///< instead of base, for a bf16 operand when T is f32
  std::vector<int64_t> batch_shape, batch_strides;
  int64_t ld = 0;                   ///< row stride
  int64_t cols = 0;

  Matrices() = default;
  explicit Matrices(const Tensor& x) {
    const DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
    held = x.device().kind == DeviceKind::cpu ? x : x.to(cpu());
    const bool widen_rows = std::is_same_v<T, float> && held.dtype() == DType::bf16;
    if (held.dtype() != dt && !widen_rows) held = held.to(dt);
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
    cols = held.size(r - 1);
    if (held.numel() == 0) return;
    if (widen_rows)
      base_bf16 = static_cast<const uint16_t*>(held.data_ptr());
    else
      base = held.template data<T>();
  }

  /// Batch index n's matrix as an element offset from the base.
  int64_t offset(int64_t index) const {
    int64_t at = 0;
    for (size_t d = batch_shape.size(); d-- > 0;) {
      at += (index % batch_shape[d]) * batch_strides[d];
      index /= batch_shape[d];
    }
    return at;
  }
  /// Batch index n's matrix (null when the operand is empty or bf16).
  const T* at(int64_t index) const { return base == nullptr ? nullptr : base + offset(index); }

  /// Rows [r0, r0 + count) of batch index n's matrix: in place, or widened from bf16 into
  /// `buffer` (row stride cols).
  Rows<T> rows(int64_t index, int64_t r0, int64_t count, std::vector<T>& buffer) const {
    if (base != nullptr) return {base + offset(index) + r0 * ld, ld};
    if (base_bf16 == nullptr) return {};
    buffer.resize(static_cast<size_t>(count * cols));
    const uint16_t* src = base_bf16 + offset(index) + r0 * ld;
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t* in = src + i * ld;
      T* out = buffer.data() + i * cols;
      for (int64_t c = 0; c < cols; ++c)  // bf16 is f32's upper half
        out[c] = std::bit_cast<float>(static_cast<uint32_t>(in[c]) << 16);
    }
    return {buffer.data(), cols};
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

  /// The mask every batch row shares when the bias does not vary over the batch (a causal
  /// mask broadcast to every head): classified once per call, not once per row.
  Mask shared_mask;
  bool shared = false;
  void classify_shared() {
    shared = !has_bias || std::all_of(bias.batch_strides.begin(), bias.batch_strides.end(),
                                      [](int64_t x) { return x == 0; });
    if (shared && n > 0 && t > 0) shared_mask = mask_of(bias_at(0), bias.ld, bias_s, t, s);
  }
  /// A thread's last classified batch row, when the bias varies over the batch.
  struct MaskCache {
    int64_t index = -1;
    Mask mask;
  };
  /// Batch row n's mask: the shared one, or its own (classified once per row and thread).
  const Mask& mask(int64_t index, MaskCache& cache) const {
    if (shared) return shared_mask;
    if (cache.index != index) {
      cache.mask = mask_of(bias_at(index), bias.ld, bias_s, t, s);
      cache.index = index;
    }
    return cache.mask;
  }
};

/// Each row's key count in the Tile::limited tile at (i0, j0), bq rows × bk keys.
inline void tile_columns(const Mask& mask, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                         std::vector<int64_t>& cols) {
  for (int64_t i = 0; i < bq; ++i) cols[i] = std::clamp<int64_t>(mask.limits[i0 + i] - j0, 0, bk);
}

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
    Rows<T> v;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t n = task / q_blocks, i0 = (task % q_blocks) * kQueryBlock,
                    i1 = std::min(o.t, i0 + kQueryBlock), bq = i1 - i0;
      const Rows<T> q = o.q.rows(n, i0, bq, q_rows);
      const T* bias = o.bias_at(n);
      const Mask& mask = o.mask(n, scratch);
      if (o.s > 0 && o.kv_row(n) != packed) {
        const Rows<T> k = o.k.rows(o.kv_row(n), 0, o.s, k_rows);
        pack_transposed(k.data, k.ld, o.s, o.e, kt);
        v = o.v.rows(o.kv_row(n), 0, o.s, v_rows);
        packed = o.kv_row(n);
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
