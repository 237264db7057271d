// exec/tile_gemm.h. The register block is MR = 6 rows × NV ≤ 4 vectors of 16 columns: 24
// accumulators, the 4 vectors of B's row and one broadcast of A fit the 32 zmm registers (on
// AVX2, 6 rows × 2 vectors of 8 in the 16 ymm registers).
// Per step of the shared dimension it loads B's row once and issues 6 · NV FMAs. Blocks at
// the edges are the same template with fewer rows, fewer vectors and a mask on the last one.
#include "exec/tile_gemm.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "runtime/blas/gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EIN_TILE_GEMM_AVX512 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wuninitialized reports
// once they are inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define EIN_TILE_GEMM_AVX512 0
#endif

namespace ein {
namespace {

/// The library path: strides turned into a transpose flag and a leading dimension.
template <class T>
void with_blas(DType dtype, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a_rs,
               int64_t a_cs, const T* b, int64_t ldb, bool accumulate, T* c, int64_t ldc) {
  bool trans_a = false;
  int64_t lda = a_rs;
  if (a_cs != 1) {
    if (a_rs != 1 && m > 1) throw std::logic_error("internal error: tile_gemm: A has no unit stride");
    trans_a = true;
    lda = a_cs;
  }
  gemm_tile(dtype, trans_a, false, m, n, k, alpha, a, lda, b, ldb, accumulate ? 1.0 : 0.0, c,
            ldc);
}

std::atomic<bool> portable{false};
std::atomic<bool> no_avx512{false};

#if EIN_TILE_GEMM_AVX512
constexpr int kRows = 6;
constexpr int kVectors = 4;
constexpr int64_t kColumns = 16 * kVectors;

/// C's rows [0, MR) × vectors [0, NV); the last vector's lanes are `last` unless Full.
template <int MR, int NV, bool Full>
__attribute__((target("avx512f"))) void block(int64_t k, float alpha, const float* a,
                                              int64_t a_rs, int64_t a_cs, const float* b,
                                              int64_t ldb, __mmask16 last, bool accumulate,
                                              float* c, int64_t ldc) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      bv[v] = Full || v + 1 < NV ? _mm512_loadu_ps(bp + 16 * v)
                                 : _mm512_maskz_loadu_ps(last, bp + 16 * v);
    const float* ap = a + p * a_cs;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(ap[r * a_rs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * ldc + 16 * v;
      const __mmask16 mask = Full || v + 1 < NV ? __mmask16(0xFFFF) : last;
      const __m512 out = accumulate
                             ? _mm512_fmadd_ps(acc[r][v], scale, _mm512_maskz_loadu_ps(mask, cp))
                             : _mm512_mul_ps(acc[r][v], scale);
      _mm512_mask_storeu_ps(cp, mask, out);
    }
}

using Block = void (*)(int64_t, float, const float*, int64_t, int64_t, const float*, int64_t,
                       __mmask16, bool, float*, int64_t);

template <int MR, bool Full>
constexpr Block blocks_of[kVectors] = {block<MR, 1, Full>, block<MR, 2, Full>, block<MR, 3, Full>,
                                       block<MR, 4, Full>};

/// [full last vector][rows - 1][vectors - 1]
constexpr const Block* kBlocks[2][kRows] = {
    {blocks_of<1, false>, blocks_of<2, false>, blocks_of<3, false>, blocks_of<4, false>,
     blocks_of<5, false>, blocks_of<6, false>},
    {blocks_of<1, true>, blocks_of<2, true>, blocks_of<3, true>, blocks_of<4, true>,
     blocks_of<5, true>, blocks_of<6, true>}};

void with_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
                 int64_t a_cs, const float* b, int64_t ldb, bool accumulate, float* c,
                 int64_t ldc) {
  // Columns outermost: B's k × 64 panel stays in L1 while the row blocks pass over it.
  for (int64_t j0 = 0; j0 < n; j0 += kColumns) {
    const int64_t cols = std::min(kColumns, n - j0);
    const int vectors = static_cast<int>((cols + 15) / 16);
    const int64_t tail = cols - 16 * (vectors - 1);
    const __mmask16 last = static_cast<__mmask16>(tail == 16 ? 0xFFFF : (1u << tail) - 1);
    for (int64_t i0 = 0; i0 < m; i0 += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, m - i0));
      kBlocks[tail == 16][rows - 1][vectors - 1](k, alpha, a + i0 * a_rs, a_rs, a_cs, b + j0, ldb, last,
                                     accumulate, c + i0 * ldc + j0, ldc);
    }
  }
}
#endif

#if EIN_TILE_GEMM_AVX512
/// The same register block for CPUs with AVX2 and FMA but no AVX-512 (a Zen 3, a Haswell):
/// MR = 6 rows × NV ≤ 2 vectors of 8 columns, 12 accumulators beside B's two vectors and A's
/// broadcast in the 16 ymm registers. The last vector's lanes past `tail` are masked.
constexpr int kRows2 = 6;
constexpr int kVectors2 = 2;
constexpr int64_t kColumns2 = 8 * kVectors2;

#define EIN_AVX2 __attribute__((target("avx2,fma")))

EIN_AVX2 inline __m256i lanes_below8(int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
}

template <int MR, int NV, bool Full>
EIN_AVX2 void block_avx2(int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                         const float* b, int64_t ldb, int64_t tail, bool accumulate, float* c,
                         int64_t ldc) {
  const __m256i last = lanes_below8(Full ? 8 : tail);
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      acc[r][v] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      bv[v] =
          Full || v + 1 < NV ? _mm256_loadu_ps(bp + 8 * v) : _mm256_maskload_ps(bp + 8 * v, last);
    const float* ap = a + p * a_cs;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 x = _mm256_broadcast_ss(ap + r * a_rs);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
        acc[r][v] = _mm256_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m256 scale = _mm256_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * ldc + 8 * v;
      const bool whole = Full || v + 1 < NV;
      const __m256 old = !accumulate ? _mm256_setzero_ps()
                         : whole     ? _mm256_loadu_ps(cp)
                                     : _mm256_maskload_ps(cp, last);
      const __m256 out =
          accumulate ? _mm256_fmadd_ps(acc[r][v], scale, old) : _mm256_mul_ps(acc[r][v], scale);
      if (whole)
        _mm256_storeu_ps(cp, out);
      else
        _mm256_maskstore_ps(cp, last, out);
    }
}

using Block2 = void (*)(int64_t, float, const float*, int64_t, int64_t, const float*, int64_t,
                        int64_t, bool, float*, int64_t);

template <int MR, bool Full>
constexpr Block2 blocks2_of[kVectors2] = {block_avx2<MR, 1, Full>, block_avx2<MR, 2, Full>};

/// [full last vector][rows - 1][vectors - 1]
constexpr const Block2* kBlocks2[2][kRows2] = {
    {blocks2_of<1, false>, blocks2_of<2, false>, blocks2_of<3, false>, blocks2_of<4, false>,
     blocks2_of<5, false>, blocks2_of<6, false>},
    {blocks2_of<1, true>, blocks2_of<2, true>, blocks2_of<3, true>, blocks2_of<4, true>,
     blocks2_of<5, true>, blocks2_of<6, true>}};

void with_avx2(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
               int64_t a_cs, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  // Columns outermost, as with_avx512: B's k × 16 panel stays in L1 over the row blocks.
  for (int64_t j0 = 0; j0 < n; j0 += kColumns2) {
    const int64_t cols = std::min(kColumns2, n - j0);
    const int vectors = static_cast<int>((cols + 7) / 8);
    const int64_t tail = cols - 8 * (vectors - 1);
    for (int64_t i0 = 0; i0 < m; i0 += kRows2) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows2, m - i0));
      kBlocks2[tail == 8][rows - 1][vectors - 1](k, alpha, a + i0 * a_rs, a_rs, a_cs, b + j0, ldb,
                                                 tail, accumulate, c + i0 * ldc + j0, ldc);
    }
  }
}

bool avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

template <class T>
void transpose(const T* src, int64_t src_ld, int64_t rows, int64_t cols, T* dst, int64_t ld) {
  constexpr int64_t kSide = 16;  // blocks of 16 × 16 keep both sides' lines in L1
  for (int64_t r0 = 0; r0 < rows; r0 += kSide)
    for (int64_t c0 = 0; c0 < cols; c0 += kSide) {
      const int64_t r1 = std::min(rows, r0 + kSide), c1 = std::min(cols, c0 + kSide);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ld + r] = src[r * src_ld + c];
    }
}

#if EIN_TILE_GEMM_AVX512
/// One 16 × 16 block in registers: rows interleaved in pairs, then quads, then 128-bit lanes.
__attribute__((target("avx512f"))) void transpose16(const float* src, int64_t src_ld, float* dst,
                                                   int64_t ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int j = 0; j < 2; ++j) {
      const __m512d a = _mm512_castps_pd(t[i + j]), b = _mm512_castps_pd(t[i + j + 2]);
      r[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
      r[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    }
  // r[4q + w] now holds, in 128-bit lane L, rows 4q..4q+3 of column 4L + w' (w' = 0, 2, 1, 3
  // for w = 0, 1, 2, 3); gather the four lanes of one column from the four quads.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);       // lanes 0, 2 of both
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);   // lanes 1, 3
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
  static constexpr int kColumn[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + kColumn[i] * ld, r[i]);
}
#endif

/// 32-bit words (f32, or pairs of bf16): the AVX-512 block transposes only move bits, and
/// their loads and stores may alias any type.
template <class W>
void transpose_words(const W* src, int64_t src_ld, int64_t rows, int64_t cols, W* dst,
                     int64_t ld) {
  static_assert(sizeof(W) == 4);
#if EIN_TILE_GEMM_AVX512
  if (avx512_tile_kernels()) {
    const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
    for (int64_t r0 = 0; r0 < full_rows; r0 += 16)
      for (int64_t c0 = 0; c0 < full_cols; c0 += 16)
        transpose16(reinterpret_cast<const float*>(src + r0 * src_ld + c0), src_ld,
                    reinterpret_cast<float*>(dst + c0 * ld + r0), ld);
    // The edges: the last rows (all columns), the last columns (the full rows).
    transpose(src + full_rows * src_ld, src_ld, rows - full_rows, cols, dst + full_rows, ld);
    transpose(src + full_cols, src_ld, full_rows, cols - full_cols, dst + full_cols * ld, ld);
    return;
  }
#endif
  transpose(src, src_ld, rows, cols, dst, ld);
}

}  // namespace

bool avx512_tile_kernels() {
#if EIN_TILE_GEMM_AVX512
  static const bool has = __builtin_cpu_supports("avx512f");
  return has && !portable.load(std::memory_order_relaxed) &&
         !no_avx512.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void force_portable_tile_kernels(bool on) { portable.store(on, std::memory_order_relaxed); }

void force_avx2_tile_kernels(bool on) {
  no_avx512.store(on, std::memory_order_relaxed);
}

bool avx2_tile_kernels() {
#if EIN_TILE_GEMM_AVX512
  return avx2_fma() && !portable.load(std::memory_order_relaxed) && !avx512_tile_kernels();
#else
  return false;
#endif
}

const char* tile_kernels_path() {
  if (avx512_tile_kernels()) return "AVX-512";
  if (avx2_tile_kernels()) return "AVX2";
  return "portable";
}

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs,
               int64_t a_cs, const float* b, int64_t ldb, bool accumulate, float* c,
               int64_t ldc) {
  if (m <= 0 || n <= 0) return;
#if EIN_TILE_GEMM_AVX512
  if (avx512_tile_kernels()) return with_avx512(m, n, k, alpha, a, a_rs, a_cs, b, ldb, accumulate, c, ldc);
  if (avx2_tile_kernels())
    return with_avx2(m, n, k, alpha, a, a_rs, a_cs, b, ldb, accumulate, c, ldc);
#endif
  with_blas(DType::f32, m, n, k, alpha, a, a_rs, a_cs, b, ldb, accumulate, c, ldc);
}

void tile_gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs,
               int64_t a_cs, const double* b, int64_t ldb, bool accumulate, double* c,
               int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  with_blas(DType::f64, m, n, k, alpha, a, a_rs, a_cs, b, ldb, accumulate, c, ldc);
}

void transpose_into(const float* src, int64_t src_ld, int64_t rows, int64_t cols, float* dst,
                    int64_t ld) {
  transpose_words(src, src_ld, rows, cols, dst, ld);
}

void transpose_into(const uint32_t* src, int64_t src_ld, int64_t rows, int64_t cols,
                    uint32_t* dst, int64_t ld) {
  transpose_words(src, src_ld, rows, cols, dst, ld);
}

void transpose_into(const double* src, int64_t src_ld, int64_t rows, int64_t cols, double* dst,
                    int64_t ld) {
  transpose(src, src_ld, rows, cols, dst, ld);
}

}  // namespace ein
