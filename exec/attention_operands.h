// The fused CPU attention's operands and masks as its kernels read them (exec/attention.cpp
// for f32 and f64, exec/attention_amx.cpp for bf16 on AMX): operands as batch × row-major
// matrices read in place where their strides allow, and a bias classified into per-row key
// limits (a causal or padding mask) or tiles to skip, to cut short or to add. Internal to exec/.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <ein/tensor.h>

namespace ein::attention_detail {

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
inline Tensor dense(const Tensor& x, DType dt) {
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
  /// One past the last key some tile reads: the keys and values a batch row needs staged (a
  /// decode step's query reads the cache's filled rows only).
  int64_t keys = 0;

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
        const TileInfo info = tile_info(bias, bt, bs, i0, i1, j0, j1);
        mask.tiles.push_back(info);
        if (info.kind != Tile::skip) mask.keys = std::max(mask.keys, info.end);
        continue;
      }
      int64_t end = j0;
      bool whole = true;
      for (int64_t i = i0; i < i1; ++i) {
        end = std::max(end, std::min(j1, mask.limits[i]));
        whole = whole && mask.limits[i] >= j1;
      }
      mask.tiles.push_back({end == j0 ? Tile::skip : whole ? Tile::plain : Tile::limited, end});
      if (end > j0) mask.keys = std::max(mask.keys, end);
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
  /// Batch index n's matrix of a bf16 operand (null when it is not one), row stride ld.
  const uint16_t* bf16_at(int64_t index) const {
    return base_bf16 == nullptr ? nullptr : base_bf16 + offset(index);
  }

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
}  // namespace ein::attention_detail
