// exec/attention_query.h.
#include "exec/attention_query.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EIN_QUERY_AVX512 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports inside _mm512_reduce_add_ps (as in softmax_tiles.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#else
#define EIN_QUERY_AVX512 0
#endif

#include "exec/tile_gemm.h"
#include "exec/vector_math.h"
#include "runtime/parallel.h"

namespace ein::attention_detail {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// The AVX-512 products, where the tile kernels run AVX-512 (avx512_tile_kernels(): tests turn
// it off to check vector_math.h's rows) and a row is whole vectors, at most 16 of them (a
// head dim of 256): q and the output accumulator are loaded once a call, not once a key, and
// four keys' horizontal sums overlap. vector_math.h's versions add a key's 16 lanes one at a
// time (1.49x slower at a head dim of 64 from this CPU's caches: BENCHMARKS.md).
constexpr int64_t kMaxVectors = 16;

bool vector_rows(int64_t width) {
  return EIN_QUERY_AVX512 && width > 0 && width % 16 == 0 && width / 16 <= kMaxVectors &&
         avx512_tile_kernels();
}

#if EIN_QUERY_AVX512

__attribute__((target("avx512f"))) inline __m512 load16(const float* x) {
  return _mm512_loadu_ps(x);
}
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* x) {  // bf16: upper half
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

template <class K>
__attribute__((target("avx512f"))) void dots_avx512(const float* q, const K* k, int64_t ld,
                                                     int64_t count, int64_t e, float scale,
                                                     float* out) {
  const int64_t nv = e / 16;
  __m512 qv[kMaxVectors];
  for (int64_t c = 0; c < nv; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const K* r = k + j * ld;
    // Row by row, each row's vectors in order: the keys are read as they lie in memory (four
    // rows read side by side, lines 4 apart, ran 1.4x slower from memory than one at a time).
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < nv; ++c) a0 = _mm512_fmadd_ps(qv[c], load16(r + 16 * c), a0);
    for (int64_t c = 0; c < nv; ++c) a1 = _mm512_fmadd_ps(qv[c], load16(r + ld + 16 * c), a1);
    for (int64_t c = 0; c < nv; ++c) a2 = _mm512_fmadd_ps(qv[c], load16(r + 2 * ld + 16 * c), a2);
    for (int64_t c = 0; c < nv; ++c) a3 = _mm512_fmadd_ps(qv[c], load16(r + 3 * ld + 16 * c), a3);
    out[j] = scale * _mm512_reduce_add_ps(a0);
    out[j + 1] = scale * _mm512_reduce_add_ps(a1);
    out[j + 2] = scale * _mm512_reduce_add_ps(a2);
    out[j + 3] = scale * _mm512_reduce_add_ps(a3);
  }
  for (; j < count; ++j) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t c = 0; c < nv; ++c) a = _mm512_fmadd_ps(qv[c], load16(k + j * ld + 16 * c), a);
    out[j] = scale * _mm512_reduce_add_ps(a);
  }
}

template <class V>
__attribute__((target("avx512f"))) void weighted_rows_avx512(const float* p, const V* v,
                                                              int64_t ld, int64_t count,
                                                              int64_t f, float* acc) {
  const int64_t nv = f / 16;
  __m512 a[kMaxVectors];
  for (int64_t c = 0; c < nv; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  for (int64_t j = 0; j < count; ++j) {
    const __m512 w = _mm512_set1_ps(p[j]);
    for (int64_t c = 0; c < nv; ++c) a[c] = _mm512_fmadd_ps(w, load16(v + j * ld + 16 * c), a[c]);
  }
  for (int64_t c = 0; c < nv; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}
#endif

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
#if EIN_QUERY_AVX512
  else if (vector_rows(e) && k.f32 != nullptr)
    dots_avx512(q, k.f32 + j0 * k.ld, k.ld, count, e, scale, out);
  else if (vector_rows(e))
    dots_avx512(q, k.bf16 + j0 * k.ld, k.ld, count, e, scale, out);
#endif
  else if (k.f32 != nullptr)
    scaled_dots(q, k.f32 + j0 * k.ld, k.ld, count, e, scale, out);
  else
    scaled_dots(q, k.bf16 + j0 * k.ld, k.ld, count, e, scale, out);
}

void add_values(const float* p, const KeyRows& v, int64_t j0, int64_t count, int64_t f,
                float* acc) {
  if (f == 0) return;
#if EIN_QUERY_AVX512
  if (vector_rows(f) && v.f32 != nullptr)
    return weighted_rows_avx512(p, v.f32 + j0 * v.ld, v.ld, count, f, acc);
  if (vector_rows(f)) return weighted_rows_avx512(p, v.bf16 + j0 * v.ld, v.ld, count, f, acc);
#endif
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
