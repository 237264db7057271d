// exec/softmax_tiles.h.
#include "exec/softmax_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/tile_gemm.h"
#include "exec/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EIN_SOFTMAX_TILES_AVX512 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports once they are inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define EIN_SOFTMAX_TILES_AVX512 0
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

#if EIN_SOFTMAX_TILES_AVX512
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
#endif

}  // namespace

void online_softmax_block(float* tile, int64_t ld, int64_t rows, int64_t width,
                          const int64_t* cols, float* m, float* l, float* acc, int64_t f) {
#if EIN_SOFTMAX_TILES_AVX512
  if (avx512_tile_kernels()) return online_avx512(tile, ld, rows, width, cols, m, l, acc, f);
#endif
  online_rows(tile, ld, rows, width, cols, m, l, acc, f);
}

void online_softmax_block(double* tile, int64_t ld, int64_t rows, int64_t width,
                          const int64_t* cols, double* m, double* l, double* acc, int64_t f) {
  online_rows(tile, ld, rows, width, cols, m, l, acc, f);
}

void probabilities_block(float* tile, int64_t ld, int64_t rows, int64_t width,
                         const int64_t* cols, const float* lse) {
#if EIN_SOFTMAX_TILES_AVX512
  if (avx512_tile_kernels()) return probabilities_avx512(tile, ld, rows, width, cols, lse);
#endif
  probability_rows(tile, ld, rows, width, cols, lse);
}

void probabilities_block(double* tile, int64_t ld, int64_t rows, int64_t width,
                         const int64_t* cols, const double* lse) {
  probability_rows(tile, ld, rows, width, cols, lse);
}

}  // namespace ein
