// ein::quantized_matmul (include/ein/quantize.h): x @ w computed from w's q8_0 or q4_0 codes.
//
// A few rows of x (a decode step: one token per sequence) make the product memory-bound: each
// weight is read once and used once per row. So the rows' kernel never writes w in float: it
// streams the codes row after row (k cut into parts, one task each), decodes each block of 32
// in registers (codes times the block's f16 scale: the exact weights) and adds x[r, k] times
// them into a partial y per part, which then add up in part order. It reads 8.5 (q8_0) or 4.5
// (q4_0) bits a weight where an f32 GEMV reads 32. For one or two rows of x the scale is
// folded into x instead (x[r, k] · scale, then times the codes: one FMA a weight after the
// conversion), four rows of codes at a time, so that a block's sums stay in registers; in
// 16-lane vectors where the CPU has AVX-512. More rows make the product compute-bound;
// then column panels of w are dequantized and multiplied by the BLAS GEMM.
//
// A weight stored [n, k] (WeightLayout::out_in: blocks along the summed axis) is read the
// other way: each output column is a dot product of x's rows with one row of codes, block by
// block (the codes times the scale, times x, summed), one task per range of rows of w; many
// rows of x multiply dequantized panels of w's rows by the GEMM with B transposed.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include <fmt/format.h>

#include <ein/autograd.h>
#include <ein/errors.h>
#include <ein/quantize.h>
#include <ein/scalar_convert.h>

#include "runtime/blas/gemm.h"
#include "runtime/counters.h"
#include "runtime/parallel.h"
#include "runtime/quantize_layout.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports wherever they inline (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace ein {
namespace {

/// k is cut into at most kMaxParts parts of at least kMinPartRows rows and kMinPartWeights
/// weights: one task each, summing into its own partial y; the partials are added in part
/// order (the same result on any number of threads). A small matrix (a toy model's, in the
/// cache) is one part: a task's dispatch and the partials' sum cost more than it does.
constexpr int64_t kMaxParts = 16;
constexpr int64_t kMinPartRows = 64;
constexpr int64_t kMinPartWeights = 65536;
constexpr int64_t kPanel = 512;  // columns dequantized per GEMM
/// Rows of x up to which the decoding kernel runs; beyond, dequantized panels and the GEMM
/// (bench/quantized_matmul.py measures where they cross).
constexpr int64_t kDecodeRows = 8;
/// How far ahead in the codes (bytes) the rows' kernel prefetches: about 8 rows of a
/// 4096-wide q8_0 matrix, the best of 4, 8 and 16 rows there (bench/quantized_matmul.py).
constexpr int64_t kPrefetchBytes = 32768;
/// Rows of x up to which the rows' kernel folds each block's scale into x (x · scale, then
/// times the codes): a block's codes are converted once and multiplied by nothing else, where
/// more rows of x share one conversion of the codes times their scale better.
constexpr int64_t kFoldedRows = 2;
/// Rows of w the folded kernels take at once: a block's sums stay in registers over them.
constexpr int kFoldRows = 4;

/// The product's operands as raw contiguous memory: x m × k, y m × n; w as stored (k × n, or
/// n × k for WeightLayout::out_in): codes of code_row bytes a row, scales nb f16 a row.
struct Operands {
  const float* x;
  float* y;
  int64_t m, k, n;
  const int8_t* codes8;   // q8_0
  const uint8_t* codes4;  // q4_0: values 2j (low 4 bits) and 2j + 1 (high 4 bits) in byte j
  int64_t code_row;
  const Half* scales;
  int64_t nb;
};

/// The value of w's stored element (kk, c): code · scale, exact in f32.
float weight(const Operands& o, int64_t kk, int64_t c) {
  int code = 0;
  if (o.codes8) {
    code = o.codes8[kk * o.code_row + c];
  } else {
    const uint8_t byte = o.codes4[kk * o.code_row + c / 2];
    code = (c % 2 == 0 ? byte & 0x0f : byte >> 4) - 8;
  }
  return static_cast<float>(code) * to_float(o.scales[kk * o.nb + c / kQuantBlock]);
}

/// acc (m × n) += x[:, kk] · w[kk, c0:n] for one row kk of w, columns from c0: the portable
/// path, and the vector path's last partial block.
void add_row_portable(const Operands& o, int64_t kk, int64_t c0, float* acc) {
  for (int64_t c = c0; c < o.n; ++c) {
    const float w = weight(o, kk, c);
    for (int64_t r = 0; r < o.m; ++r)
      acc[r * o.n + c] += o.x[r * o.k + kk] * w;
  }
}

void part_portable(const Operands& o, int64_t k0, int64_t k1, float* acc) {
  for (int64_t kk = k0; kk < k1; ++kk)
    add_row_portable(o, kk, 0, acc);
}

#if defined(__x86_64__)
#define EIN_AVX2 __attribute__((target("avx2,fma,f16c")))

/// An f16 scale's value through F16C (to_float is a call and branches).
EIN_AVX2 inline float scale_value(Half h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.bits)));
}

/// The block of 32 codes at `codes` (q8_0: 32 bytes; q4_0: 16) as four vectors of 8 int8, in
/// column order: q4_0's nibbles are split and interleaved back.
template <bool Q8>
EIN_AVX2 inline void load_block(const uint8_t* codes, __m128i v[4]) {
  if constexpr (Q8) {
    for (int i = 0; i < 4; ++i)
      v[i] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * i));
  } else {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
    const __m128i first = _mm_sub_epi8(_mm_unpacklo_epi8(low, high), _mm_set1_epi8(8));
    const __m128i second = _mm_sub_epi8(_mm_unpackhi_epi8(low, high), _mm_set1_epi8(8));
    v[0] = first;
    v[1] = _mm_srli_si128(first, 8);
    v[2] = second;
    v[3] = _mm_srli_si128(second, 8);
  }
}

/// Row kk's nb block scales in f32.
EIN_AVX2 void row_scales(const Operands& o, int64_t kk, float* d) {
  const Half* s = o.scales + kk * o.nb;
  int64_t b = 0;
  for (; b + 8 <= o.nb; b += 8)
    _mm256_storeu_ps(d + b,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b))));
  for (; b < o.nb; ++b)
    d[b] = scale_value(s[b]);
}

/// acc (m × n) += x[:, k0:k1] @ w[k0:k1, :], streaming the codes row after row: two rows of w
/// at a time, each block of 32 decoded in registers (codes converted, times the block's
/// scale: the exact weights) and added into every row of acc with one load and store per 16
/// weights.
template <bool Q8>
EIN_AVX2 void part_avx2(const Operands& o, int64_t k0, int64_t k1, float* acc) {
  const int64_t full = o.n / kQuantBlock;  // whole blocks; a partial last one goes portable
  const int64_t block_bytes = Q8 ? kQuantBlock : kQuantBlock / 2;
  const uint8_t* codes = Q8 ? reinterpret_cast<const uint8_t*>(o.codes8) : o.codes4;
  std::vector<float> d0(static_cast<size_t>(o.nb)), d1(static_cast<size_t>(o.nb));
  for (int64_t kk = k0; kk < k1; kk += 2) {
    // A lone last row pairs with itself times x = 0: adding ±0 leaves the sums as they are.
    const bool pair = kk + 1 < k1;
    const uint8_t* row0 = codes + kk * o.code_row;
    const uint8_t* row1 = pair ? row0 + o.code_row : row0;
    row_scales(o, kk, d0.data());
    row_scales(o, pair ? kk + 1 : kk, d1.data());
    // The codes kPrefetchBytes ahead, a line at a time: the hardware's prefetchers alone left
    // the loads waiting (perf: most of the kernel's samples on them).
    const uint8_t* ahead =
        (kk + 2) * o.code_row + kPrefetchBytes < k1 * o.code_row ? row0 + kPrefetchBytes : nullptr;
    for (int64_t b = 0; b < full; ++b) {
      if (ahead && (b * block_bytes) % 64 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + b * block_bytes), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(ahead + o.code_row + b * block_bytes),
                     _MM_HINT_T0);
      }
      __m128i c0[4], c1[4];
      load_block<Q8>(row0 + b * block_bytes, c0);
      load_block<Q8>(row1 + b * block_bytes, c1);
      const __m256 s0 = _mm256_set1_ps(d0[b]), s1 = _mm256_set1_ps(d1[b]);
      __m256 w0[4], w1[4];
      for (int i = 0; i < 4; ++i) {
        w0[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c0[i])), s0);
        w1[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c1[i])), s1);
      }
      for (int64_t r = 0; r < o.m; ++r) {
        const __m256 x0 = _mm256_broadcast_ss(o.x + r * o.k + kk);
        const __m256 x1 = pair ? _mm256_broadcast_ss(o.x + r * o.k + kk + 1) : _mm256_setzero_ps();
        float* a = acc + r * o.n + b * kQuantBlock;
        for (int i = 0; i < 4; ++i) {
          __m256 v = _mm256_loadu_ps(a + 8 * i);
          v = _mm256_fmadd_ps(x0, w0[i], v);
          v = _mm256_fmadd_ps(x1, w1[i], v);
          _mm256_storeu_ps(a + 8 * i, v);
        }
      }
    }
    if (full * kQuantBlock < o.n) {
      add_row_portable(o, kk, full * kQuantBlock, acc);
      if (pair) add_row_portable(o, kk + 1, full * kQuantBlock, acc);
    }
  }
}

/// xs[b] = x · (row kk's scale of block b), for its nb blocks: the scale folded into x.
EIN_AVX2 void folded_scales(const Operands& o, int64_t kk, float x, float* xs) {
  const Half* s = o.scales + kk * o.nb;
  const __m256 xv = _mm256_set1_ps(x);
  int64_t b = 0;
  for (; b + 8 <= o.nb; b += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b));
    _mm256_storeu_ps(xs + b, _mm256_mul_ps(xv, _mm256_cvtph_ps(halves)));
  }
  for (; b < o.nb; ++b)
    xs[b] = x * scale_value(s[b]);
}

/// The cache line kPrefetchBytes after `at` in each of the R rows of codes from `at` on.
template <int R>
inline void prefetch_rows(const Operands& o, const uint8_t* at) {
  for (int j = 0; j < R; ++j)
    _mm_prefetch(reinterpret_cast<const char*>(at + j * o.code_row + kPrefetchBytes), _MM_HINT_T0);
}

/// acc (M × n) += Σ_j xs[r, j, b] · codes[j, block b] over the R rows of codes at `rows` and
/// the whole blocks b, xs as folded_scales() makes it (row r of x, row j of codes: at (r·R +
/// j)·nb): each block's sums loaded once, R rows of codes converted and added into them with
/// one FMA per 8 weights and row of x, then stored.
template <bool Q8, int M, int R>
EIN_AVX2 void group_avx2(const Operands& o, const uint8_t* rows, const float* xs, float* acc,
                         bool prefetch) {
  constexpr int64_t block_bytes = Q8 ? kQuantBlock : kQuantBlock / 2;
  const int64_t full = o.n / kQuantBlock;
  for (int64_t b = 0; b < full; ++b) {
    if (prefetch && (b * block_bytes) % 64 == 0) prefetch_rows<R>(o, rows + b * block_bytes);
    __m256 a[M][4];
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < 4; ++i)
        a[r][i] = _mm256_loadu_ps(acc + r * o.n + b * kQuantBlock + 8 * i);
    for (int j = 0; j < R; ++j) {
      __m128i c[4];
      load_block<Q8>(rows + j * o.code_row + b * block_bytes, c);
      __m256 s[M];
      for (int r = 0; r < M; ++r)
        s[r] = _mm256_broadcast_ss(xs + (r * R + j) * o.nb + b);
      for (int i = 0; i < 4; ++i) {
        const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c[i]));
        for (int r = 0; r < M; ++r)
          a[r][i] = _mm256_fmadd_ps(s[r], f, a[r][i]);
      }
    }
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < 4; ++i)
        _mm256_storeu_ps(acc + r * o.n + b * kQuantBlock + 8 * i, a[r][i]);
  }
}

#define EIN_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

/// The block of 32 codes at `codes` as two vectors of 16 int32, in column order.
template <bool Q8>
EIN_AVX512 inline void load_block16(const uint8_t* codes, __m512i v[2]) {
  if constexpr (Q8) {
    v[0] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    v[1] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16)));
  } else {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i low = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
    v[0] = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_unpacklo_epi8(low, high), _mm_set1_epi8(8)));
    v[1] = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_unpackhi_epi8(low, high), _mm_set1_epi8(8)));
  }
}

/// group_avx2() in 16-lane vectors: a block's sums are two registers a row of x.
template <bool Q8, int M, int R>
EIN_AVX512 void group_avx512(const Operands& o, const uint8_t* rows, const float* xs,
                             float* acc, bool prefetch) {
  constexpr int64_t block_bytes = Q8 ? kQuantBlock : kQuantBlock / 2;
  const int64_t full = o.n / kQuantBlock;
  for (int64_t b = 0; b < full; ++b) {
    if (prefetch && (b * block_bytes) % 64 == 0) prefetch_rows<R>(o, rows + b * block_bytes);
    __m512 a[M][2];
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < 2; ++i)
        a[r][i] = _mm512_loadu_ps(acc + r * o.n + b * kQuantBlock + 16 * i);
    for (int j = 0; j < R; ++j) {
      __m512i c[2];
      load_block16<Q8>(rows + j * o.code_row + b * block_bytes, c);
      __m512 s[M];
      for (int r = 0; r < M; ++r)
        s[r] = _mm512_set1_ps(xs[(r * R + j) * o.nb + b]);
      for (int i = 0; i < 2; ++i) {
        const __m512 f = _mm512_cvtepi32_ps(c[i]);
        for (int r = 0; r < M; ++r)
          a[r][i] = _mm512_fmadd_ps(s[r], f, a[r][i]);
      }
    }
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < 2; ++i)
        _mm512_storeu_ps(acc + r * o.n + b * kQuantBlock + 16 * i, a[r][i]);
  }
}

/// Rows kk to kk + R of w into acc (M rows of x): their scales folded into x, the whole
/// blocks through the group kernel, a partial last block portably.
template <bool Q8, int M, int R, bool Wide>
EIN_AVX2 void fold_rows(const Operands& o, int64_t kk, float* xs, float* acc) {
  // x · scale overflows only where x · code · scale does, except for a code of 0: there the
  // reference adds 0 and the fold inf · 0 = NaN. So a finite x that a scale (at most f16's
  // largest, 65504) could take past FLT_MAX goes the exact way, row by row.
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < R; ++j)
      if (const float x = std::fabs(o.x[r * o.k + kk + j]);
          x > std::numeric_limits<float>::max() / 65504.0f && !std::isinf(x)) {
        for (int jj = 0; jj < R; ++jj)
          add_row_portable(o, kk + jj, 0, acc);
        return;
      }
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < R; ++j)
      folded_scales(o, kk + j, o.x[r * o.k + kk + j], xs + (r * R + j) * o.nb);
  const uint8_t* rows = (Q8 ? reinterpret_cast<const uint8_t*>(o.codes8) : o.codes4) +
                        kk * o.code_row;
  // Up to the matrix's end, into the next part too: a part of a small matrix is shorter than
  // the prefetch distance.
  const bool prefetch = (kk + R) * o.code_row + kPrefetchBytes < o.k * o.code_row;
  if constexpr (Wide)
    group_avx512<Q8, M, R>(o, rows, xs, acc, prefetch);
  else
    group_avx2<Q8, M, R>(o, rows, xs, acc, prefetch);
  if (o.n % kQuantBlock != 0)
    for (int j = 0; j < R; ++j)
      add_row_portable(o, kk + j, o.n - o.n % kQuantBlock, acc);
}

/// acc (M × n) += x[:, k0:k1] @ w[k0:k1, :] for M ≤ kFoldedRows rows of x: kFoldRows rows of
/// w at a time, then the rest one by one.
template <bool Q8, int M, bool Wide>
EIN_AVX2 void part_folded(const Operands& o, int64_t k0, int64_t k1, float* acc) {
  std::vector<float> xs(static_cast<size_t>(M * kFoldRows * o.nb));
  int64_t kk = k0;
  for (; kk + kFoldRows <= k1; kk += kFoldRows)
    fold_rows<Q8, M, kFoldRows, Wide>(o, kk, xs.data(), acc);
  for (; kk < k1; ++kk)
    fold_rows<Q8, M, 1, Wide>(o, kk, xs.data(), acc);
}

template <bool Wide>
void part_folded(const Operands& o, int64_t k0, int64_t k1, float* acc) {
  if (o.codes8)
    o.m == 1 ? part_folded<true, 1, Wide>(o, k0, k1, acc)
             : part_folded<true, 2, Wide>(o, k0, k1, acc);
  else
    o.m == 1 ? part_folded<false, 1, Wide>(o, k0, k1, acc)
             : part_folded<false, 2, Wide>(o, k0, k1, acc);
}

/// out[0 : c1 - c0] = w[kk, c0:c1], c0 a multiple of kQuantBlock: whole blocks decoded in
/// registers, a partial last one portably.
template <bool Q8>
EIN_AVX2 void decode_row_avx2(const Operands& o, int64_t kk, int64_t c0, int64_t c1, float* out) {
  const int64_t block_bytes = Q8 ? kQuantBlock : kQuantBlock / 2;
  const uint8_t* row = (Q8 ? reinterpret_cast<const uint8_t*>(o.codes8) : o.codes4) +
                       kk * o.code_row + c0 / kQuantBlock * block_bytes;
  const Half* scales = o.scales + kk * o.nb + c0 / kQuantBlock;
  int64_t c = c0;
  for (; c + kQuantBlock <= c1; c += kQuantBlock, row += block_bytes, ++scales) {
    __m128i v[4];
    load_block<Q8>(row, v);
    const __m256 d = _mm256_set1_ps(scale_value(*scales));
    for (int i = 0; i < 4; ++i)
      _mm256_storeu_ps(out + (c - c0) + 8 * i,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[i])), d));
  }
  for (; c < c1; ++c)
    out[c - c0] = weight(o, kk, c);
}

/// The sum of v's eight lanes.
EIN_AVX2 inline float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

/// y[:, j] = x @ w[j, :] for the rows j0 ≤ j < j1 of an out_in weight (n × k): each block of
/// 32 codes decoded in registers and multiplied into M rows of x, A accumulators a row so
/// the FMAs do not wait on each other; a partial last block portably.
template <bool Q8, int M>
EIN_AVX2 void dots_avx2(const Operands& o, int64_t j0, int64_t j1) {
  constexpr int A = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  const int64_t full = o.k / kQuantBlock;
  const int64_t block_bytes = Q8 ? kQuantBlock : kQuantBlock / 2;
  const uint8_t* codes = Q8 ? reinterpret_cast<const uint8_t*>(o.codes8) : o.codes4;
  const uint8_t* end = codes + o.n * o.code_row;  // a task prefetches into the next one
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = codes + j * o.code_row;
    const Half* scales = o.scales + j * o.nb;
    __m256 acc[M][A];
    for (int r = 0; r < M; ++r)
      for (int a = 0; a < A; ++a)
        acc[r][a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < full; ++b) {
      const uint8_t* block = row + b * block_bytes;
      if ((b * block_bytes) % 64 == 0 && block + kPrefetchBytes < end)
        _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes), _MM_HINT_T0);
      __m128i c[4];
      load_block<Q8>(block, c);
      const __m256 d = _mm256_set1_ps(scale_value(scales[b]));
      __m256 w[4];
      for (int i = 0; i < 4; ++i)
        w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c[i])), d);
      for (int r = 0; r < M; ++r) {
        const float* x = o.x + r * o.k + b * kQuantBlock;
        for (int i = 0; i < 4; ++i)
          acc[r][i % A] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + 8 * i), acc[r][i % A]);
      }
    }
    for (int r = 0; r < M; ++r) {
      for (int a = 1; a < A; ++a)
        acc[r][0] = _mm256_add_ps(acc[r][0], acc[r][a]);
      float sum = lane_sum(acc[r][0]);
      for (int64_t c = full * kQuantBlock; c < o.k; ++c)
        sum += o.x[r * o.k + c] * weight(o, j, c);
      o.y[r * o.n + j] = sum;
    }
  }
}

/// dots_avx2() in 16-lane vectors: a block of 32 codes is two registers of exact weights.
template <bool Q8, int M>
EIN_AVX512 void dots_avx512(const Operands& o, int64_t j0, int64_t j1) {
  constexpr int A = M <= 4 ? 2 : 1;
  const int64_t full = o.k / kQuantBlock;
  const int64_t block_bytes = Q8 ? kQuantBlock : kQuantBlock / 2;
  const uint8_t* codes = Q8 ? reinterpret_cast<const uint8_t*>(o.codes8) : o.codes4;
  const uint8_t* end = codes + o.n * o.code_row;  // a task prefetches into the next one
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = codes + j * o.code_row;
    const Half* scales = o.scales + j * o.nb;
    __m512 acc[M][A];
    for (int r = 0; r < M; ++r)
      for (int a = 0; a < A; ++a)
        acc[r][a] = _mm512_setzero_ps();
    // Block b into the accumulators `a` (a compile-time index: a runtime one would keep them
    // in memory, each block's sums waiting on the last one's store).
    const auto add_block = [&](int64_t b, auto a) EIN_AVX512 {
      const uint8_t* block = row + b * block_bytes;
      if ((b * block_bytes) % 64 == 0 && block + kPrefetchBytes < end)
        _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes), _MM_HINT_T0);
      __m512i c[2];
      load_block16<Q8>(block, c);
      const __m512 d = _mm512_set1_ps(scale_value(scales[b]));
      const __m512 w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(c[0]), d);
      const __m512 w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(c[1]), d);
      for (int r = 0; r < M; ++r) {
        const float* x = o.x + r * o.k + b * kQuantBlock;
        acc[r][a] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), acc[r][a]);
        acc[r][a] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), acc[r][a]);
      }
    };
    int64_t b = 0;
    if constexpr (A == 2)
      for (; b + 2 <= full; b += 2) {
        add_block(b, std::integral_constant<int, 0>{});
        add_block(b + 1, std::integral_constant<int, 1>{});
      }
    for (; b < full; ++b)
      add_block(b, std::integral_constant<int, 0>{});
    for (int r = 0; r < M; ++r) {
      for (int a = 1; a < A; ++a)
        acc[r][0] = _mm512_add_ps(acc[r][0], acc[r][a]);
      float sum = _mm512_reduce_add_ps(acc[r][0]);
      for (int64_t c = full * kQuantBlock; c < o.k; ++c)
        sum += o.x[r * o.k + c] * weight(o, j, c);
      o.y[r * o.n + j] = sum;
    }
  }
}

template <bool Q8>
EIN_AVX512 void dots_avx512(const Operands& o, int64_t j0, int64_t j1) {
  switch (o.m) {
    case 1: return dots_avx512<Q8, 1>(o, j0, j1);
    case 2: return dots_avx512<Q8, 2>(o, j0, j1);
    case 3: return dots_avx512<Q8, 3>(o, j0, j1);
    case 4: return dots_avx512<Q8, 4>(o, j0, j1);
    case 5: return dots_avx512<Q8, 5>(o, j0, j1);
    case 6: return dots_avx512<Q8, 6>(o, j0, j1);
    case 7: return dots_avx512<Q8, 7>(o, j0, j1);
    default: return dots_avx512<Q8, 8>(o, j0, j1);
  }
}

template <bool Q8>
EIN_AVX2 void dots_avx2(const Operands& o, int64_t j0, int64_t j1) {
  switch (o.m) {
    case 1: return dots_avx2<Q8, 1>(o, j0, j1);
    case 2: return dots_avx2<Q8, 2>(o, j0, j1);
    case 3: return dots_avx2<Q8, 3>(o, j0, j1);
    case 4: return dots_avx2<Q8, 4>(o, j0, j1);
    case 5: return dots_avx2<Q8, 5>(o, j0, j1);
    case 6: return dots_avx2<Q8, 6>(o, j0, j1);
    case 7: return dots_avx2<Q8, 7>(o, j0, j1);
    default: return dots_avx2<Q8, 8>(o, j0, j1);
  }
}

#endif

/// The best set this CPU has.
detail::QuantKernels best_kernels() {
#if defined(__x86_64__)
  static const detail::QuantKernels best = [] {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
      return detail::QuantKernels::portable;
    return __builtin_cpu_supports("avx512f") ? detail::QuantKernels::avx512
                                              : detail::QuantKernels::avx2;
  }();
  return best;
#else
  return detail::QuantKernels::portable;
#endif
}

std::atomic<int> forced_kernels{-1};

/// out[0 : c1 - c0] = w[kk, c0:c1] on this CPU's best path (c0 a multiple of kQuantBlock).
void decode_row(const Operands& o, int64_t kk, int64_t c0, int64_t c1, float* out) {
#if defined(__x86_64__)
  if (detail::quant_kernels() != detail::QuantKernels::portable) {
    if (o.codes8)
      decode_row_avx2<true>(o, kk, c0, c1, out);
    else
      decode_row_avx2<false>(o, kk, c0, c1, out);
    return;
  }
#endif
  for (int64_t c = c0; c < c1; ++c)
    out[c - c0] = weight(o, kk, c);
}

/// acc (m × n, zeroed) += x[:, k0:k1] @ w[k0:k1, :] on this CPU's best path.
void add_part(const Operands& o, int64_t k0, int64_t k1, float* acc) {
#if defined(__x86_64__)
  const detail::QuantKernels kernels = detail::quant_kernels();
  if (kernels != detail::QuantKernels::portable && o.m <= kFoldedRows) {
    if (kernels == detail::QuantKernels::avx512)
      part_folded<true>(o, k0, k1, acc);
    else
      part_folded<false>(o, k0, k1, acc);
    return;
  }
  if (kernels != detail::QuantKernels::portable) {
    if (o.codes8)
      part_avx2<true>(o, k0, k1, acc);
    else
      part_avx2<false>(o, k0, k1, acc);
    return;
  }
#endif
  part_portable(o, k0, k1, acc);
}

/// y[:, j] = x @ w[j, :] for rows j0 ≤ j < j1 of an out_in weight, on this CPU's best path.
void add_dots(const Operands& o, int64_t j0, int64_t j1) {
#if defined(__x86_64__)
  if (detail::quant_kernels() == detail::QuantKernels::avx512) {
    if (o.codes8)
      dots_avx512<true>(o, j0, j1);
    else
      dots_avx512<false>(o, j0, j1);
    return;
  }
  if (detail::quant_kernels() != detail::QuantKernels::portable) {
    if (o.codes8)
      dots_avx2<true>(o, j0, j1);
    else
      dots_avx2<false>(o, j0, j1);
    return;
  }
#endif
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t r = 0; r < o.m; ++r) {
      float sum = 0;
      for (int64_t c = 0; c < o.k; ++c)
        sum += o.x[r * o.k + c] * weight(o, j, c);
      o.y[r * o.n + j] = sum;
    }
}

/// The rows' kernel of an out_in weight: its rows (y's columns) in ranges, one task each;
/// every column's sum is one task's, so the result does not depend on the threads.
void dot_rows(const Operands& o) {
  parallel_for(0, o.n, std::max<int64_t>(1, kMinPartWeights / std::max<int64_t>(1, o.k)),
               [&](int64_t lo, int64_t hi) { add_dots(o, lo, hi); });
}

/// The rows' kernel: k cut into parts, one task each summing into its partial y (y itself when
/// there is one part), then the partials added in order, in parallel over y's elements.
void decode_rows(const Operands& o) {
  // A multiple of 4 where there are 4 or more, so that 2 or 4 threads share them evenly (768 ×
  // 768 at one row: 9 parts took 53 µs, 8 take 47); never a function of the thread count.
  const int64_t most = std::clamp<int64_t>(
      std::min(o.k / kMinPartRows, o.k * o.n / kMinPartWeights), 1, kMaxParts);
  const int64_t parts = most >= 4 ? most / 4 * 4 : most;
  const int64_t rows_per_part = (o.k + parts - 1) / parts;
  const int64_t size = o.m * o.n;
  // ein's allocator keeps freed blocks: no fresh pages to fault in on every call.
  const Tensor partial_buffer = zeros({parts > 1 ? parts * size : 0});
  float* partial = parts > 1 ? partial_buffer.data<float>() : nullptr;
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t k0 = p * rows_per_part, k1 = std::min(o.k, k0 + rows_per_part);
      if (k0 < k1) add_part(o, k0, k1, parts > 1 ? partial + p * size : o.y);
    }
  });
  if (parts == 1) return;
  parallel_for(0, size, 16384, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float sum = 0;
      for (int64_t p = 0; p < parts; ++p)
        sum += partial[p * size + i];
      o.y[i] = sum;
    }
  });
}

/// Many rows: each panel of kPanel of w's columns (in_out: each of its k rows' slice) or of
/// its rows (out_in: whole rows of k) dequantized in parallel, then y[:, panel] = x @ panel
/// (or x @ panelᵀ) by the BLAS GEMM.
void dequantized_panels(const Operands& o, bool out_in) {
  const Tensor panel_buffer = empty({o.k * std::min(o.n, kPanel)});
  float* panel = panel_buffer.data<float>();
  for (int64_t c0 = 0; c0 < o.n; c0 += kPanel) {
    const int64_t width = std::min(kPanel, o.n - c0);
    const int64_t rows = out_in ? width : o.k, row = out_in ? o.k : width;  // the panel's
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t r = lo; r < hi; ++r) {
                     if (out_in)
                       decode_row(o, c0 + r, 0, o.k, panel + r * row);
                     else
                       decode_row(o, r, c0, c0 + width, panel + r * row);
                   }
                 });
    GemmBatch g;
    g.m = o.m;
    g.n = width;
    g.k = o.k;
    g.a = o.x;
    g.lda = std::max<int64_t>(1, o.k);
    g.trans_b = out_in;
    g.b = panel;
    g.ldb = std::max<int64_t>(1, row);
    g.c = o.y + c0;
    g.ldc = o.n;
    gemm_batched(g);
  }
}

}  // namespace

namespace detail {

QuantKernels quant_kernels() {
  const int forced = forced_kernels.load(std::memory_order_relaxed);
  return forced < 0 ? best_kernels() : static_cast<QuantKernels>(forced);
}

bool force_quant_kernels(std::optional<QuantKernels> kernels) {
  if (kernels && static_cast<int>(*kernels) > static_cast<int>(best_kernels())) return false;
  forced_kernels.store(kernels ? static_cast<int>(*kernels) : -1, std::memory_order_relaxed);
  return true;
}

std::string_view quant_kernels_name(QuantKernels kernels) {
  switch (kernels) {
    case QuantKernels::portable: return "portable";
    case QuantKernels::avx2: return "avx2";
    case QuantKernels::avx512: return "avx512";
  }
  return "?";
}

}  // namespace detail

Tensor quantized_matmul(const Tensor& x, const QuantizedTensor& w, WeightLayout layout) {
  if (!x.defined()) throw RuntimeError("quantized_matmul: x is undefined");
  if (w.shape.size() != 2)
    throw RuntimeError(
        fmt::format("quantized_matmul: w has shape {}; it multiplies as a matrix ([k, n] in "
                    "`x @ w`, [n, k] in `x @ wᵀ`)",
                    shape_str(w.shape)));
  const bool out_in = layout == WeightLayout::out_in;
  const int64_t k = w.shape[out_in ? 1 : 0], n = w.shape[out_in ? 0 : 1];
  if (x.dim() < 1 || x.shape().back() != k)
    throw RuntimeError(fmt::format("quantized_matmul: x {} @ w{} [{}, {}]: x's last axis must be "
                                   "k = {}",
                                   shape_str(x.shape()), out_in ? "ᵀ" : "", w.shape[0],
                                   w.shape[1], k));
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16 && x.dtype() != DType::f16)
    throw RuntimeError(
        fmt::format("quantized_matmul: x is {}; it computes in f32 from f32, bf16 or f16 inputs",
                    dtype_name(x.dtype())));
  if (x.device().kind != DeviceKind::cpu)
    throw RuntimeError(fmt::format(
        "quantized_matmul: x is on {}; the quantized product runs on the CPU", x.device().str()));
  if (x.requires_grad() && grad_enabled())
    throw RuntimeError(
        "quantized_matmul has no gradient (inference only): run it under ein::NoGrad or pass "
        "x.detach()");
  // The layout's checks (codes' and scales' shapes and dtypes) are dequantize()'s.
  detail::check_quantized_layout(w, "quantized_matmul");

  Shape out_shape = x.shape();
  out_shape.back() = n;
  int64_t m = 1;  // x's rows: its leading axes together
  for (size_t d = 0; d + 1 < out_shape.size(); ++d)
    m *= out_shape[d];
  Tensor y = zeros(out_shape, DType::f32);
  // Counted once below, as one launch with its FLOPs and bytes; the panels' GEMMs inside it
  // add their launches only.
  std::optional<detail::CountingNode> counted;
  if (detail::counting()) counted.emplace("quantized_matmul", detail::current_phase());
  if (m > 0 && n > 0 && k > 0) {
    const Tensor xc = x.to(DType::f32).contiguous();
    const Tensor codes = w.codes.contiguous(), scales = w.scales.contiguous();
    const int64_t stored_row = w.shape[1];  // the blocks' axis
    Operands o{xc.data<float>(),
               y.data<float>(),
               m,
               k,
               n,
               w.type == QuantType::q8_0 ? codes.data<int8_t>() : nullptr,
               w.type == QuantType::q4_0 ? codes.data<uint8_t>() : nullptr,
               w.type == QuantType::q8_0 ? stored_row : (stored_row + 1) / 2,
               static_cast<const Half*>(scales.data_ptr()),
               (stored_row + kQuantBlock - 1) / kQuantBlock};
    if (m > kDecodeRows)
      dequantized_panels(o, out_in);
    else if (out_in)
      dot_rows(o);
    else
      decode_rows(o);
  }
  counted.reset();
  if (detail::counting()) {
    const int64_t flops = 2 * m * k * n;
    detail::count_launch(
        "quantized_matmul",
        CostTotals{flops, flops, m * k * static_cast<int64_t>(element_size(x.dtype())) + w.nbytes(),
                   m * n * static_cast<int64_t>(element_size(x.dtype())), 1});
  }
  return x.dtype() == DType::f32 ? y : y.to(x.dtype());
}

}  // namespace ein
