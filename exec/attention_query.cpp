// exec/attention_query.h.
#include "exec/attention_query.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "exec/vector_math.h"
#include "runtime/parallel.h"

namespace ein::attention_detail {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// Key rows [j0, j1) of batch row `row` of k or v: f32 in place, bf16 in place.
struct KeyRows {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  int64_t ld = 0;
};

KeyRows key_rows(const Matrices<float>& x, int64_t row) {
  return {x.at(row), x.bf16_at(row), x.ld};
}

void logits(const float* q, const KeyRows& k, int64_t j0, int64_t count, int64_t e, float scale,
            float* out) {
  if (e == 0)  // empty rows (no data to point at): logits 0
    std::fill(out, out + count, 0.0f);
  else if (k.f32 != nullptr)
    scaled_dots(q, k.f32 + j0 * k.ld, k.ld, count, e, scale, out);
  else
    scaled_dots(q, k.bf16 + j0 * k.ld, k.ld, count, e, scale, out);
}

void add_values(const float* p, const KeyRows& v, int64_t j0, int64_t count, int64_t f,
                float* acc) {
  if (f == 0) return;
  if (v.f32 != nullptr)
    add_weighted_rows(p, v.f32 + j0 * v.ld, v.ld, count, f, acc);
  else
    add_weighted_rows(p, v.bf16 + j0 * v.ld, v.ld, count, f, acc);
}

}  // namespace

Tensor forward_one_query(const Operands<float>& o, double scale, const Shape& out_shape) {
  Tensor out = empty(out_shape, DType::f32, cpu());
  float* out_data = out.data<float>();
  const int64_t width = o.f + 1;
  // A task per batch row (a head's keys and values: a few hundred kB at most).
  parallel_for(0, o.n, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(static_cast<size_t>(o.s)), acc(static_cast<size_t>(o.f)), q_row;
    Operands<float>::MaskCache scratch;
    for (int64_t n = lo; n < hi; ++n) {
      float* dst = out_data + n * width;
      const Mask& mask = o.mask(n, scratch);
      const int64_t keys = mask.keys;  // the logits past it are all -inf
      std::fill(acc.begin(), acc.end(), 0.0f);
      float m = kMinusInf, l = 0;
      if (keys > 0) {
        const float* q = o.q.rows(n, 0, 1, q_row).data;
        const KeyRows k = key_rows(o.k, o.kv_row(n)), v = key_rows(o.v, o.kv_row(n));
        const float* bias = o.bias_at(n);
        // The key blocks as the tiles see them: a block the bias masks whole is not read,
        // nor the columns past its `end`.
        for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
          const int64_t j1 = std::min(keys, j0 + kKeyBlock);
          const TileInfo& info = mask.tile(0, j0, o.s);
          const int64_t end = info.kind == Tile::skip ? j0 : std::min(info.end, j1);
          if (end > j0) logits(q, k, j0, end - j0, o.e, static_cast<float>(scale), &row[j0]);
          if (info.kind == Tile::biased)
            add_bias(&row[j0], bias + j0 * o.bias_s, end - j0, o.bias_s);
          std::fill(row.begin() + end, row.begin() + j1, kMinusInf);
        }
        m = row_max(row.data(), keys, kMinusInf);
        if (m != kMinusInf) {
          l = exp_shift_sum(row.data(), keys, m);
          for (int64_t j0 = 0; j0 < keys; j0 += kKeyBlock) {
            const TileInfo& info = mask.tile(0, j0, o.s);
            if (info.kind == Tile::skip) continue;
            const int64_t end = std::min({info.end, keys, j0 + kKeyBlock});
            add_values(&row[j0], v, j0, end - j0, o.f, acc.data());
          }
        }
      }
      // As the tiles finish a row: a NaN sum gives lse -inf and the NaN of acc.
      const float inv = l > 0 ? 1.0f / l : 0.0f;
      for (int64_t c = 0; c < o.f; ++c) dst[c] = acc[c] * inv;
      dst[o.f] = l > 0 ? m + std::log(l) : kMinusInf;
    }
  });
  return out;
}

}  // namespace ein::attention_detail
