// bf16 tile products and their packers (amx_tiles.h). On AMX the product keeps a 32 × 32 block
// of C in four tile registers and walks k in steps of 32 with two A and two B tiles, so every
// tile load feeds two dot products. On AVX512-BF16 it keeps a 4 × 64 block of C in sixteen
// vector registers and walks k a pair at a time: four loads of B's pair-row, and per row of A
// one broadcast of its pair, feed sixteen vdpbf16ps. Packers from f32 round with AVX512-BF16's
// conversion (round to nearest even) and interleave pairs with one 16-bit permute; the
// transposing one moves 32-bit words (a bf16 pair) with tile_gemm.h's transposes where widths
// and strides are even, element by element otherwise. Every packer has a scalar path with the
// same bits.
#include "exec/amx_tiles.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "exec/tile_gemm.h"
#include "runtime/amx.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#define EIN_AMX 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wuninitialized reports
// once they are inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define EIN_AMX 0
#endif

namespace ein {
namespace {

std::atomic<bool> turned_off{false};
std::atomic<bool> avx512_forced{false};

/// bf16 bits of x as AVX512-BF16's conversion makes them: round to nearest even, a NaN stays
/// a NaN (its quiet bit set), and a subnormal becomes a zero of its sign (the instruction
/// flushes them), so that both paths of the packers agree bit for bit.
inline uint16_t bf16_of(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#if EIN_AMX
// Tiles (runtime/amx.h's configuration): C tiles 0-3, A tiles 4-5, B tiles 6-7.

/// A 16·R × 16·C block of C (R, C ∈ {1, 2}) over all of k.
template <int R, int C>
__attribute__((target("amx-tile,amx-bf16"))) void block(int64_t k, const uint16_t* a,
                                                        int64_t lda, const uint16_t* b,
                                                        int64_t ldb, bool accumulate, float* c,
                                                        int64_t ldc) {
  const int64_t sa = lda * 2, sb = ldb * 2, sc = ldc * 4;  // strides in bytes
  float* c1 = c + 16 * ldc;
  if (accumulate) {
    _tile_loadd(0, c, sc);
    if constexpr (C > 1) _tile_loadd(1, c + 16, sc);
    if constexpr (R > 1) _tile_loadd(2, c1, sc);
    if constexpr (R > 1 && C > 1) _tile_loadd(3, c1 + 16, sc);
  } else {
    _tile_zero(0);
    if constexpr (C > 1) _tile_zero(1);
    if constexpr (R > 1) _tile_zero(2);
    if constexpr (R > 1 && C > 1) _tile_zero(3);
  }
  for (int64_t p = 0; p < k; p += 32) {
    const uint16_t* bp = b + (p / 2) * ldb;
    _tile_loadd(4, a + p, sa);
    if constexpr (R > 1) _tile_loadd(5, a + 16 * lda + p, sa);
    _tile_loadd(6, bp, sb);
    if constexpr (C > 1) _tile_loadd(7, bp + 32, sb);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (C > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (R > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (R > 1 && C > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, sc);
  if constexpr (C > 1) _tile_stored(1, c + 16, sc);
  if constexpr (R > 1) _tile_stored(2, c1, sc);
  if constexpr (R > 1 && C > 1) _tile_stored(3, c1 + 16, sc);
}

__attribute__((target("amx-tile,amx-bf16"))) void gemm(int64_t m, int64_t n, int64_t k,
                                                       const uint16_t* a, int64_t lda,
                                                       const uint16_t* b, int64_t ldb,
                                                       bool accumulate, float* c, int64_t ldc) {
  // The tile loads' asm does not tell the compiler it reads memory: whatever the caller
  // stored into a and b must be in memory first.
  asm volatile("" ::: "memory");
  load_tile_config();
  for (int64_t i = 0; i < m; i += 32) {
    const bool two_rows = m - i >= 32;
    for (int64_t j = 0; j < n; j += 32) {
      const bool two_cols = n - j >= 32;
      const uint16_t* ai = a + i * lda;
      const uint16_t* bj = b + 2 * j;
      float* cij = c + i * ldc + j;
      if (two_rows && two_cols)
        block<2, 2>(k, ai, lda, bj, ldb, accumulate, cij, ldc);
      else if (two_rows)
        block<2, 1>(k, ai, lda, bj, ldb, accumulate, cij, ldc);
      else if (two_cols)
        block<1, 2>(k, ai, lda, bj, ldb, accumulate, cij, ldc);
      else
        block<1, 1>(k, ai, lda, bj, ldb, accumulate, cij, ldc);
    }
  }
  _tile_release();
}

/// 32 bf16 from their bits.
__attribute__((target("avx512f,avx512bf16"))) inline __m512bh as_bf16(__m512i v) {
  __m512bh r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

/// A 4 × 16·C block of C (C ∈ 1..4) over all of k on AVX512-BF16: lane j of accumulator
/// (r, c) gains A[r][2p]·B[2p][16c + j] + A[r][2p + 1]·B[2p + 1][16c + j] per pair-row p.
template <int C>
__attribute__((target("avx512f,avx512bf16"))) void dp_block(int64_t k, const uint16_t* a,
                                                           int64_t lda, const uint16_t* b,
                                                           int64_t ldb, bool accumulate,
                                                           float* c, int64_t ldc) {
  constexpr int R = 4;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j)
      acc[r][j] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * j) : _mm512_setzero_ps();
  for (int64_t p = 0; p < k / 2; ++p) {
    const uint16_t* bp = b + p * ldb;
    __m512bh bv[C];
    for (int j = 0; j < C; ++j) bv[j] = as_bf16(_mm512_loadu_si512(bp + 32 * j));
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof pair);
      const __m512bh av = as_bf16(_mm512_set1_epi32(static_cast<int>(pair)));
      for (int j = 0; j < C; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], av, bv[j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) _mm512_storeu_ps(c + r * ldc + 16 * j, acc[r][j]);
}

/// The AVX512-BF16 product: 64 columns of B at a time (its pair-rows stay in L1 across the
/// row blocks), the rows four at a time (m is a multiple of 16).
void dp_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
             int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  for (int64_t j = 0; j < n; j += 64) {
    const int64_t cols = std::min<int64_t>(64, n - j);
    const uint16_t* bj = b + 2 * j;
    for (int64_t i = 0; i < m; i += 4) {
      const uint16_t* ai = a + i * lda;
      float* cij = c + i * ldc + j;
      switch (cols / 16) {
        case 4: dp_block<4>(k, ai, lda, bj, ldb, accumulate, cij, ldc); break;
        case 3: dp_block<3>(k, ai, lda, bj, ldb, accumulate, cij, ldc); break;
        case 2: dp_block<2>(k, ai, lda, bj, ldb, accumulate, cij, ldc); break;
        default: dp_block<1>(k, ai, lda, bj, ldb, accumulate, cij, ldc); break;
      }
    }
  }
}

/// The 32 bf16 of a conversion as integer lanes.
__attribute__((target("avx512f,avx512bf16"))) inline __m512i bits(__m512bh v) {
  __m512i r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

/// The 16 bf16 of a conversion as integer lanes.
__attribute__((target("avx512f,avx512bf16"))) inline __m256i half_bits(__m256bh v) {
  __m256i r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

/// The first r of 16 lanes (none when r ≤ 0).
inline __mmask16 lanes(int64_t r) {
  return r >= 16 ? __mmask16(0xffff) : r <= 0 ? __mmask16(0) : __mmask16((1u << r) - 1);
}

/// 16-bit lane order that interleaves the low and high halves: t, 16 + t for t = 0..15.
__attribute__((target("avx512f"))) inline __m512i interleave_halves() {
  alignas(64) uint16_t idx[32];
  for (int t = 0; t < 16; ++t) {
    idx[2 * t] = static_cast<uint16_t>(t);
    idx[2 * t + 1] = static_cast<uint16_t>(16 + t);
  }
  return _mm512_load_si512(idx);
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void a_from_f32_avx512(
    const float* x, int64_t ld, int64_t rows, int64_t cols, float scale, uint16_t* dst,
    int64_t ld_dst, int64_t rows_pad, int64_t cols_pad) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < rows_pad; ++i) {
    uint16_t* out = dst + i * ld_dst;
    if (i >= rows) {
      std::memset(out, 0, static_cast<size_t>(cols_pad) * sizeof(uint16_t));
      continue;
    }
    const float* in = x + i * ld;
    for (int64_t j = 0; j < cols_pad; j += 32) {
      const __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(cols - j), in + j), s);
      const __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(cols - j - 16), in + j + 16), s);
      _mm512_storeu_si512(out + j, bits(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pairs_from_f32_avx512(
    const float* x, int64_t ld, int64_t k, int64_t n, float scale, uint16_t* dst, int64_t ldb,
    int64_t k_pad, int64_t n_pad) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i order = interleave_halves();
  for (int64_t p = 0; 2 * p < k_pad; ++p) {
    const int64_t r0 = 2 * p, r1 = 2 * p + 1;
    uint16_t* out = dst + p * ldb;
    for (int64_t j = 0; j < n_pad; j += 16) {
      const __mmask16 m = lanes(n - j);
      const __m512 a = r0 < k ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + r0 * ld + j), s)
                              : _mm512_setzero_ps();
      const __m512 b = r1 < k ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + r1 * ld + j), s)
                              : _mm512_setzero_ps();
      const __m512i both = bits(_mm512_cvtne2ps_pbh(b, a));
      _mm512_storeu_si512(out + 2 * j, _mm512_permutexvar_epi16(order, both));
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void pairs_from_bf16_avx512(
    const uint16_t* x, int64_t ld, int64_t k, int64_t n, uint16_t* dst, int64_t ldb,
    int64_t k_pad, int64_t n_pad) {
  const __m512i order = interleave_halves();
  for (int64_t p = 0; 2 * p < k_pad; ++p) {
    const int64_t r0 = 2 * p, r1 = 2 * p + 1;
    uint16_t* out = dst + p * ldb;
    for (int64_t j = 0; j < n_pad; j += 16) {
      const __mmask16 m = lanes(n - j);
      const __m256i a = r0 < k ? _mm256_maskz_loadu_epi16(m, x + r0 * ld + j) : _mm256_setzero_si256();
      const __m256i b = r1 < k ? _mm256_maskz_loadu_epi16(m, x + r1 * ld + j) : _mm256_setzero_si256();
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
      _mm512_storeu_si512(out + 2 * j, _mm512_permutexvar_epi16(order, both));
    }
  }
}
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void ds_operands_avx512(
    const float* p, const float* dp, int64_t ld, const float* delta, int64_t rows, int64_t cols,
    float scale, uint16_t* a, int64_t lda, uint16_t* pairs, int64_t ldb) {
  const __m512i order = interleave_halves();
  const int64_t a_rows = round_up(rows, 16), a_cols = round_up(cols, 32),
                k_pad = round_up(rows, 32), n_pad = round_up(cols, 16);
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t r0 = 0; r0 < k_pad; r0 += 2) {
    __m512 ds[2];
    for (int64_t j = 0; j < a_cols; j += 16) {
      const __mmask16 m = lanes(cols - j);
      for (int h = 0; h < 2; ++h) {
        const int64_t r = r0 + h;
        if (r < rows) {
          const __m512 pr = _mm512_maskz_loadu_ps(m, p + r * ld + j);
          const __m512 dpr = _mm512_maskz_loadu_ps(m, dp + r * ld + j);
          ds[h] = _mm512_maskz_mul_ps(m, _mm512_mul_ps(pr, s),
                                      _mm512_sub_ps(dpr, _mm512_set1_ps(delta[r])));
        } else {
          ds[h] = _mm512_setzero_ps();
        }
        if (r < a_rows)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + r * lda + j),
                              half_bits(_mm512_cvtneps_pbh(ds[h])));
      }
      if (j < n_pad)
        _mm512_storeu_si512(pairs + (r0 / 2) * ldb + 2 * j,
                            _mm512_permutexvar_epi16(order, bits(_mm512_cvtne2ps_pbh(ds[1], ds[0]))));
    }
  }
}
#endif

}  // namespace

bool bf16_tiles() {
#if EIN_AMX
  return (amx_usable() || avx512_bf16_usable()) && !turned_off.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool amx_tiles() {
#if EIN_AMX
  return amx_usable() && !turned_off.load(std::memory_order_relaxed) &&
         !avx512_forced.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void force_no_amx_tiles(bool off) { turned_off.store(off, std::memory_order_relaxed); }
void force_avx512_bf16_tiles(bool on) { avx512_forced.store(on, std::memory_order_relaxed); }

void bf16_tile_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  if (m % 16 != 0 || n % 16 != 0 || k % 32 != 0)
    throw std::logic_error("bf16_tile_gemm: m and n must be multiples of 16, k of 32");
#if EIN_AMX
  if (m <= 0 || n <= 0) return;
  if (amx_tiles()) return gemm(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  if (!bf16_tiles()) throw std::logic_error("bf16_tile_gemm: this CPU has no bf16 dot products");
  dp_gemm(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
#else
  (void)a, (void)lda, (void)b, (void)ldb, (void)accumulate, (void)c, (void)ldc;
  throw std::logic_error("bf16_tile_gemm: this build has no bf16 tile kernels");
#endif
}

void a_from_f32(const float* x, int64_t ld, int64_t rows, int64_t cols, float scale,
                uint16_t* dst, int64_t ld_dst, int64_t rows_pad, int64_t cols_pad) {
#if EIN_AMX
  if (bf16_tiles() && cols_pad % 32 == 0)
    return a_from_f32_avx512(x, ld, rows, cols, scale, dst, ld_dst, rows_pad, cols_pad);
#endif
  for (int64_t i = 0; i < rows_pad; ++i)
    for (int64_t j = 0; j < cols_pad; ++j)
      dst[i * ld_dst + j] = i < rows && j < cols ? bf16_of(scale * x[i * ld + j]) : 0;
}

void a_from_bf16(const uint16_t* x, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst,
                 int64_t ld_dst, int64_t rows_pad, int64_t cols_pad) {
  for (int64_t i = 0; i < rows_pad; ++i) {
    uint16_t* out = dst + i * ld_dst;
    const int64_t copied = i < rows ? cols : 0;
    if (copied > 0) std::memcpy(out, x + i * ld, static_cast<size_t>(copied) * sizeof(uint16_t));
    std::memset(out + copied, 0, static_cast<size_t>(cols_pad - copied) * sizeof(uint16_t));
  }
}

void pairs_from_f32(const float* x, int64_t ld, int64_t k, int64_t n, float scale, uint16_t* dst,
                    int64_t ldb, int64_t k_pad, int64_t n_pad) {
#if EIN_AMX
  if (bf16_tiles() && n_pad % 16 == 0)
    return pairs_from_f32_avx512(x, ld, k, n, scale, dst, ldb, k_pad, n_pad);
#endif
  for (int64_t p = 0; 2 * p < k_pad; ++p)
    for (int64_t j = 0; j < n_pad; ++j)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t r = 2 * p + h;
        dst[p * ldb + 2 * j + h] = r < k && j < n ? bf16_of(scale * x[r * ld + j]) : 0;
      }
}

void pairs_from_bf16(const uint16_t* x, int64_t ld, int64_t k, int64_t n, uint16_t* dst,
                     int64_t ldb, int64_t k_pad, int64_t n_pad) {
#if EIN_AMX
  if (bf16_tiles() && n_pad % 16 == 0)
    return pairs_from_bf16_avx512(x, ld, k, n, dst, ldb, k_pad, n_pad);
#endif
  for (int64_t p = 0; 2 * p < k_pad; ++p)
    for (int64_t j = 0; j < n_pad; ++j)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t r = 2 * p + h;
        dst[p * ldb + 2 * j + h] = r < k && j < n ? x[r * ld + j] : 0;
      }
}

void pairs_from_bf16_transposed(const uint16_t* x, int64_t ld, int64_t n, int64_t k,
                                uint16_t* dst, int64_t ldb, int64_t k_pad, int64_t n_pad) {
  const auto aligned = [](const void* at) { return reinterpret_cast<uintptr_t>(at) % 4 == 0; };
  if (k % 2 == 0 && ld % 2 == 0 && ldb % 2 == 0 && aligned(x) && aligned(dst)) {
    // Pair-row p, column j is the 32-bit word of x's row j at column 2p: x's words transposed.
    transpose_into(reinterpret_cast<const uint32_t*>(x), ld / 2, n, k / 2,
                   reinterpret_cast<uint32_t*>(dst), ldb / 2);
    for (int64_t p = 0; 2 * p < k_pad; ++p) {
      const int64_t from = 2 * p < k ? n : 0;
      std::memset(dst + p * ldb + 2 * from, 0, static_cast<size_t>(2 * (n_pad - from)) * sizeof(uint16_t));
    }
    return;
  }
  for (int64_t p = 0; 2 * p < k_pad; ++p) {
    uint16_t* out = dst + p * ldb;
    const int64_t c0 = 2 * p, c1 = 2 * p + 1;
    for (int64_t j = 0; j < n_pad; ++j) {
      const bool row = j < n;
      out[2 * j] = row && c0 < k ? x[j * ld + c0] : 0;
      out[2 * j + 1] = row && c1 < k ? x[j * ld + c1] : 0;
    }
  }
}

}  // namespace ein

namespace ein {

void ds_operands(const float* p, const float* dp, int64_t ld, const float* delta, int64_t rows,
                 int64_t cols, float scale, uint16_t* a, int64_t lda, uint16_t* pairs,
                 int64_t ldb) {
#if EIN_AMX
  if (bf16_tiles()) return ds_operands_avx512(p, dp, ld, delta, rows, cols, scale, a, lda, pairs, ldb);
#endif
  const int64_t a_rows = round_up(rows, 16), a_cols = round_up(cols, 32),
                k_pad = round_up(rows, 32), n_pad = round_up(cols, 16);
  for (int64_t r = 0; r < k_pad; ++r)
    for (int64_t j = 0; j < a_cols; ++j) {
      const bool in = r < rows && j < cols;
      const uint16_t v = in ? bf16_of(scale * p[r * ld + j] * (dp[r * ld + j] - delta[r])) : 0;
      if (r < a_rows) a[r * lda + j] = v;
      if (j < n_pad) pairs[(r / 2) * ldb + 2 * j + r % 2] = v;
    }
}

}  // namespace ein
