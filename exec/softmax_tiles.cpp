// exec/softmax_tiles.h.
#include "exec/softmax_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/tile_gemm.h"
#include "exec/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EIN_SOFTMAX_TILES_X86 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports once they are inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define EIN_SOFTMAX_TILES_X86 0
#endif

namespace ein {
namespace {

template <class T>
T shift_of(T max) {
  return std::isinf(max) && max < 0 ? T(0) : max;
}

/// The portable path, row by row on vector_math.h.
template <class T>
void online_rows(T* tile, int64_t ld, int64_t rows, int64_t width, const int64_t* cols, T* m,
                 T* l, T* acc, int64_t f) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = tile + i * ld;
    const int64_t c = cols != nullptr ? cols[i] : width;
    const T mx = row_max(row, c, m[i]);
    const T shift = shift_of(mx);
    const T sum = exp_shift_sum(row, c, shift);
    std::fill(row + c, row + width, T(0));
    const T correction = std::exp(m[i] - shift);
    l[i] = l[i] * correction + sum;
    m[i] = mx;
    if (correction != T(1))
      for (int64_t j = 0; j < f; ++j) acc[i * f + j] *= correction;
  }
}

template <class T>
void probability_rows(T* tile, int64_t ld, int64_t rows, int64_t width, const int64_t* cols,
                      const T* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = tile + i * ld;
    const int64_t c = cols != nullptr ? cols[i] : width;
    exp_shift_sum(row, c, shift_of(lse[i]));
    std::fill(row + c, row + width, T(0));
  }
}

#if EIN_SOFTMAX_TILES_X86
#define EIN_AVX512 __attribute__((target("avx512f")))

/// exp(in) on 16 lanes, as exp_shift_sum computes it for in ≤ 88.7: results below 2^-126 are
/// 0 and NaN stays NaN. 18 vector instructions: the NaN goes through max and min as their
/// second operand (vmaxps returns the second operand when one is NaN) and through the
/// arithmetic, and vscalefps multiplies by 2^k where the integer conversion, add, shift and
/// multiply took four. The vector ports, not latency, bound the softmax's loops.
EIN_AVX512 inline __m512 exp16(__m512 in) {
  const __mmask16 keep = _mm512_cmp_ps_mask(in, _mm512_set1_ps(-87.33654f), _CMP_NLT_UQ);
  __m512 a = _mm512_max_ps(_mm512_set1_ps(-87.33654f), in);
  a = _mm512_min_ps(_mm512_set1_ps(88.72283f), a);
  const __m512 big = _mm512_set1_ps(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
  const __m512 kf = _mm512_sub_ps(_mm512_fmadd_ps(a, _mm512_set1_ps(1.44269504088896341f), big), big);
  __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693359375f), a);
  r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(keep, p, kf);
}

/// Lanes [0, n) of a 16-lane vector (n may be ≤ 0 or ≥ 16).
EIN_AVX512 inline __mmask16 lanes_below(int64_t n) {
  if (n >= 16) return 0xFFFF;
  return n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

/// row[j] = exp(row[j] - shift) for j < c, 0 for c ≤ j < width; returns the sum. Inlined into
/// the loops over rows, so that the polynomial's constants stay in registers; whole vectors
/// first, without masks.
EIN_AVX512 __attribute__((always_inline)) inline float exp_row(float* row, int64_t c, int64_t width,
                                                               float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= c; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + j), s));
    sum = _mm512_add_ps(sum, e);
    _mm512_storeu_ps(row + j, e);
  }
  if (j < c) {
    const __mmask16 valid = lanes_below(c - j);
    const __m512 x = _mm512_maskz_loadu_ps(valid, row + j);
    const __m512 e = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(x, s)));
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(row + j, lanes_below(width - j), e);
    j += 16;
  }
  for (; j < width; j += 16) _mm512_mask_storeu_ps(row + j, lanes_below(width - j), _mm512_setzero_ps());
  return _mm512_reduce_add_ps(sum);
}

// The online step in three passes over the block's rows (each row's max, then every row's
// exp, then the running sums and rescaling 16 rows at a time), so that independent rows'
// work overlaps and the per-row scalar exp and reductions leave the inner loops. With the
// 18-instruction exp and unmasked whole vectors the step takes about 16 cycles per 16 logits
// alone (ein_tile_kernel_timings); the first version, a row at a time with masked loads and a
// 24-instruction exp, took 34.
EIN_AVX512 void online_avx512(float* tile, int64_t ld, int64_t rows, int64_t width,
                              const int64_t* cols, float* m, float* l, float* acc, int64_t f) {
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  constexpr int64_t kMaxRows = 64;
  float max[kMaxRows], shift[kMaxRows], sum[kMaxRows];
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
    const int64_t n = std::min(kMaxRows, rows - r0);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = tile + (r0 + i) * ld;
      const int64_t c = cols != nullptr ? cols[r0 + i] : width;
      __m512 mx = _mm512_set1_ps(minus_inf);
      __mmask16 nan = 0;
      int64_t j = 0;
      for (; j + 16 <= c; j += 16) {
        const __m512 x = _mm512_loadu_ps(row + j);
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, x);
      }
      if (j < c) {
        const __mmask16 valid = lanes_below(c - j);
        const __m512 x = _mm512_maskz_loadu_ps(valid, row + j);
        nan |= _mm512_mask_cmp_ps_mask(valid, x, x, _CMP_UNORD_Q);
        mx = _mm512_mask_max_ps(mx, valid, mx, x);
      }
      const float before = m[r0 + i];
      // A NaN anywhere: the first, as the unfused max reduction gives (and so a NaN row).
      float row_mx = nan != 0 ? row_max(row, c, before) : std::max(_mm512_reduce_max_ps(mx), before);
      if (before != before) row_mx = before;
      max[i] = row_mx;
      shift[i] = shift_of(row_mx);
    }
    for (int64_t i = 0; i < n; ++i)
      sum[i] = exp_row(tile + (r0 + i) * ld, cols != nullptr ? cols[r0 + i] : width, width,
                       shift[i]);
    // The running sums, 16 rows at a time: l = l·exp(m_old - shift) + sum, and each row of
    // acc times its correction (exactly 1 when the max did not grow).
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 lanes = lanes_below(n - i);
      const __m512 before = _mm512_maskz_loadu_ps(lanes, m + r0 + i);
      const __m512 correction = exp16(_mm512_sub_ps(before, _mm512_maskz_loadu_ps(lanes, shift + i)));
      const __m512 sums = _mm512_maskz_loadu_ps(lanes, sum + i);
      const __m512 running = _mm512_maskz_loadu_ps(lanes, l + r0 + i);
      _mm512_mask_storeu_ps(l + r0 + i, lanes, _mm512_fmadd_ps(running, correction, sums));
      _mm512_mask_storeu_ps(m + r0 + i, lanes, _mm512_maskz_loadu_ps(lanes, max + i));
      alignas(64) float k[16];
      _mm512_store_ps(k, correction);
      for (int64_t row = 0; row < std::min<int64_t>(16, n - i); ++row) {
        float* a = acc + (r0 + i + row) * f;
        const __m512 scale = _mm512_set1_ps(k[row]);
        for (int64_t j = 0; j < f; j += 16) {
          const __mmask16 cols_left = lanes_below(f - j);
          _mm512_mask_storeu_ps(a + j, cols_left,
                                _mm512_mul_ps(_mm512_maskz_loadu_ps(cols_left, a + j), scale));
        }
      }
    }
  }
}

EIN_AVX512 void probabilities_avx512(float* tile, int64_t ld, int64_t rows, int64_t width,
                                     const int64_t* cols, const float* lse) {
  for (int64_t i = 0; i < rows; ++i)
    exp_row(tile + i * ld, cols != nullptr ? cols[i] : width, width, shift_of(lse[i]));
}

/// The same three passes on CPUs with AVX2 and FMA but no AVX-512 (a Zen 3, a Haswell): eight
/// lanes, masks as vectors (maskload, maskstore, and) where AVX-512 has mask registers, and
/// 2^k put together in the exponent bits where AVX-512 has vscalefps. Same results up to
/// rounding; exp16's comments hold for exp8.
#define EIN_AVX2 __attribute__((target("avx2,fma")))

/// exp(in) on 8 lanes for in ≤ 88.3 (2^k must be a finite float; softmax's arguments are ≤ 0):
/// results below 2^-126 are 0 and NaN stays NaN.
EIN_AVX2 inline __m256 exp8(__m256 in) {
  const __m256 keep = _mm256_cmp_ps(in, _mm256_set1_ps(-87.33654f), _CMP_NLT_UQ);
  __m256 a = _mm256_max_ps(_mm256_set1_ps(-87.33654f), in);
  a = _mm256_min_ps(_mm256_set1_ps(88.72283f), a);
  const __m256 big = _mm256_set1_ps(12582912.0f);
  const __m256 kf =
      _mm256_sub_ps(_mm256_fmadd_ps(a, _mm256_set1_ps(1.44269504088896341f), big), big);
  __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693359375f), a);
  r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^k as (k + 127) << 23; k ≥ -126 after the clamp. A NaN's k is garbage, its p NaN.
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(kf), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

/// Lanes [0, n) of an 8-lane vector as a mask of all-ones lanes (n may be ≤ 0 or ≥ 8).
EIN_AVX2 inline __m256i lanes_below8(int64_t n) {
  const int count = static_cast<int>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

EIN_AVX2 inline float sum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

EIN_AVX2 inline float max8(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

/// exp_row on 8 lanes.
EIN_AVX2 __attribute__((always_inline)) inline float exp_row8(float* row, int64_t c, int64_t width,
                                                              float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= c; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), s));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(row + j, e);
  }
  if (j < c) {
    const __m256i valid = lanes_below8(c - j);
    const __m256 x = _mm256_maskload_ps(row + j, valid);
    const __m256 e = _mm256_and_ps(_mm256_castsi256_ps(valid), exp8(_mm256_sub_ps(x, s)));
    sum = _mm256_add_ps(sum, e);
    _mm256_maskstore_ps(row + j, lanes_below8(width - j), e);
    j += 8;
  }
  for (; j < width; j += 8)
    _mm256_maskstore_ps(row + j, lanes_below8(width - j), _mm256_setzero_ps());
  return sum8(sum);
}

EIN_AVX2 void online_avx2(float* tile, int64_t ld, int64_t rows, int64_t width, const int64_t* cols,
                          float* m, float* l, float* acc, int64_t f) {
  constexpr float minus_inf = -std::numeric_limits<float>::infinity();
  constexpr int64_t kMaxRows = 64;
  alignas(32) float max[kMaxRows], shift[kMaxRows], sum[kMaxRows];
  for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
    const int64_t n = std::min(kMaxRows, rows - r0);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = tile + (r0 + i) * ld;
      const int64_t c = cols != nullptr ? cols[r0 + i] : width;
      const __m256 none = _mm256_set1_ps(minus_inf);
      __m256 mx = none, nan = _mm256_setzero_ps();
      int64_t j = 0;
      for (; j + 8 <= c; j += 8) {
        const __m256 x = _mm256_loadu_ps(row + j);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        mx = _mm256_max_ps(mx, x);
      }
      if (j < c) {
        const __m256i valid = lanes_below8(c - j);
        const __m256 x =
            _mm256_blendv_ps(none, _mm256_maskload_ps(row + j, valid), _mm256_castsi256_ps(valid));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
        mx = _mm256_max_ps(mx, x);
      }
      const float before = m[r0 + i];
      float row_mx =
          _mm256_movemask_ps(nan) != 0 ? row_max(row, c, before) : std::max(max8(mx), before);
      if (before != before) row_mx = before;
      max[i] = row_mx;
      shift[i] = shift_of(row_mx);
    }
    for (int64_t i = 0; i < n; ++i)
      sum[i] =
          exp_row8(tile + (r0 + i) * ld, cols != nullptr ? cols[r0 + i] : width, width, shift[i]);
    for (int64_t i = 0; i < n; i += 8) {
      const __m256i lanes = lanes_below8(n - i);
      const __m256 before = _mm256_maskload_ps(m + r0 + i, lanes);
      const __m256 correction = exp8(_mm256_sub_ps(before, _mm256_load_ps(shift + i)));
      const __m256 running = _mm256_maskload_ps(l + r0 + i, lanes);
      _mm256_maskstore_ps(l + r0 + i, lanes,
                          _mm256_fmadd_ps(running, correction, _mm256_load_ps(sum + i)));
      _mm256_maskstore_ps(m + r0 + i, lanes, _mm256_load_ps(max + i));
      alignas(32) float k[8];
      _mm256_store_ps(k, correction);
      for (int64_t row = 0; row < std::min<int64_t>(8, n - i); ++row) {
        if (k[row] == 1.0f) continue;  // the max did not grow
        float* a = acc + (r0 + i + row) * f;
        const __m256 scale = _mm256_set1_ps(k[row]);
        int64_t j = 0;
        for (; j + 8 <= f; j += 8)
          _mm256_storeu_ps(a + j, _mm256_mul_ps(_mm256_loadu_ps(a + j), scale));
        if (j < f) {
          const __m256i left = lanes_below8(f - j);
          _mm256_maskstore_ps(a + j, left, _mm256_mul_ps(_mm256_maskload_ps(a + j, left), scale));
        }
      }
    }
  }
}

EIN_AVX2 void probabilities_avx2(float* tile, int64_t ld, int64_t rows, int64_t width,
                                 const int64_t* cols, const float* lse) {
  for (int64_t i = 0; i < rows; ++i)
    exp_row8(tile + i * ld, cols != nullptr ? cols[i] : width, width, shift_of(lse[i]));
}
#endif

}  // namespace

void online_softmax_block(float* tile, int64_t ld, int64_t rows, int64_t width,
                          const int64_t* cols, float* m, float* l, float* acc, int64_t f) {
#if EIN_SOFTMAX_TILES_X86
  if (avx512_tile_kernels()) return online_avx512(tile, ld, rows, width, cols, m, l, acc, f);
  if (avx2_tile_kernels()) return online_avx2(tile, ld, rows, width, cols, m, l, acc, f);
#endif
  online_rows(tile, ld, rows, width, cols, m, l, acc, f);
}

void online_softmax_block(double* tile, int64_t ld, int64_t rows, int64_t width,
                          const int64_t* cols, double* m, double* l, double* acc, int64_t f) {
  online_rows(tile, ld, rows, width, cols, m, l, acc, f);
}

void probabilities_block(float* tile, int64_t ld, int64_t rows, int64_t width,
                         const int64_t* cols, const float* lse) {
#if EIN_SOFTMAX_TILES_X86
  if (avx512_tile_kernels()) return probabilities_avx512(tile, ld, rows, width, cols, lse);
  if (avx2_tile_kernels()) return probabilities_avx2(tile, ld, rows, width, cols, lse);
#endif
  probability_rows(tile, ld, rows, width, cols, lse);
}

void probabilities_block(double* tile, int64_t ld, int64_t rows, int64_t width,
                         const int64_t* cols, const double* lse) {
  probability_rows(tile, ld, rows, width, cols, lse);
}

}  // namespace ein
