// The fused attention's tile kernels (exec/tile_gemm.h, exec/softmax_tiles.h) against their
// definitions evaluated in double, on both paths: the AVX-512 code (where the CPU has it) and
// the portable one (the BLAS and vector_math.h), which every CPU without AVX-512 runs. Sizes
// straddle the register blocks (6 rows, 16-column vectors, 64-column panels), A comes
// row-major and transposed, C with and without accumulation, and the values include ±inf, NaN
// and logits whose exp is subnormal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "exec/softmax_tiles.h"
#include "exec/tile_gemm.h"

namespace ein {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Runs `body` on the AVX-512 path (when the CPU has it) and on the portable one.
template <class F>
void on_both_paths(F body) {
  for (bool portable : {false, true}) {
    force_portable_tile_kernels(portable);
    SCOPED_TRACE(avx512_tile_kernels() ? "AVX-512 path" : "portable path");
    body();
  }
  force_portable_tile_kernels(false);
}

/// Same value, NaN for NaN, or within a relative tolerance.
void expect_close(double got, double want, double tol, const std::string& what) {
  if (std::isnan(want) || std::isinf(want)) {
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << what << ": " << got << " for NaN";
    else EXPECT_EQ(got, want) << what;
    return;
  }
  EXPECT_LE(std::abs(got - want), tol * (1 + std::abs(want))) << what << ": " << got << " vs " << want;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void check_gemm(int64_t m, int64_t n, int64_t k, bool transposed, bool accumulate,
                const std::vector<std::pair<int64_t, float>>& specials = {}) {
  SCOPED_TRACE(fmt::format("m {} n {} k {} transposed {} accumulate {}", m, n, k, transposed,
                           accumulate));
  std::mt19937 rng(static_cast<unsigned>(m * 1000 + n * 10 + k));
  const int64_t lda = (transposed ? m : k) + 3, ldb = n + 5, ldc = n + 2;
  const int64_t a_rows = transposed ? k : m;
  std::vector<float> a = random_floats(static_cast<size_t>(std::max<int64_t>(a_rows, 1) * lda), rng);
  for (auto [at, value] : specials) a[static_cast<size_t>(at)] = value;
  const std::vector<float> b = random_floats(static_cast<size_t>(std::max<int64_t>(k, 1) * ldb), rng);
  const std::vector<float> c0 = random_floats(static_cast<size_t>(m * ldc), rng);
  const float alpha = 0.75f;
  const auto a_at = [&](int64_t i, int64_t p) { return transposed ? a[p * lda + i] : a[i * lda + p]; };
  on_both_paths([&] {
    std::vector<float> c = c0;
    if (!accumulate)  // C is not read: what it held cannot show through
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = kNaN;
    tile_gemm(m, n, k, alpha, a.data(), transposed ? 1 : lda, transposed ? lda : 1, b.data(), ldb,
              accumulate, c.data(), ldc);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p) want += double(a_at(i, p)) * b[p * ldb + j];
        want = alpha * want + (accumulate ? c0[i * ldc + j] : 0.0);
        expect_close(c[i * ldc + j], want, 1e-5 * (1 + k), fmt::format("C[{}][{}]", i, j));
      }
      for (int64_t j = n; j < ldc; ++j)  // the padding past n is left alone
        EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]) << "C[" << i << "][" << j << "]";
    }
  });
}

TEST(TileGemm, MatchesTheDefinition) {
  for (bool transposed : {false, true})
    for (bool accumulate : {false, true}) {
      check_gemm(1, 1, 1, transposed, accumulate);
      check_gemm(6, 64, 64, transposed, accumulate);    // one full register block per panel
      check_gemm(64, 128, 64, transposed, accumulate);  // the attention's tiles
      check_gemm(7, 65, 3, transposed, accumulate);     // a row and a column past the blocks
      check_gemm(13, 200, 17, transposed, accumulate);  // three panels and a 8-column tail
      check_gemm(5, 9, 0, transposed, accumulate);      // no shared dimension: C = 0 or kept
    }
}

TEST(TileGemm, InfinitiesAndNaNPropagate) {
  // A's row 0 holds +inf and row 2 a NaN (k = 5, A row-major with lda = k + 3 = 8): C's rows
  // 0 and 2 are ±inf or NaN as the double sums are, row 1 stays finite.
  check_gemm(3, 20, 5, false, false, {{0, kInf}, {2 * 8 + 1, kNaN}});
  check_gemm(3, 20, 5, false, true, {{0, -kInf}, {1, kInf}});  // inf - inf: NaN
}

TEST(TileTranspose, MatchesTheDefinition) {
  on_both_paths([] {
    for (int64_t rows : {0, 1, 15, 16, 17, 33, 128})
      for (int64_t cols : {0, 1, 7, 16, 31, 64, 70}) {
        const int64_t src_ld = cols + 3, ld = rows + 5;
        std::vector<float> src(static_cast<size_t>(rows * src_ld + 1)),
            dst(static_cast<size_t>(cols * ld + 1), -1.0f);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
        transpose_into(src.data(), src_ld, rows, cols, dst.data(), ld);
        int64_t wrong = 0;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) wrong += dst[c * ld + r] != src[r * src_ld + c];
        EXPECT_EQ(wrong, 0) << rows << " × " << cols;
      }
  });
}

/// A tile of logits, rows × width (ld = width + 3): random, with -inf, a logit whose exp is
/// subnormal (-100 below the row's max) and, in row 4, a NaN.
std::vector<float> logits(int64_t rows, int64_t width, std::mt19937& rng) {
  std::vector<float> t = random_floats(static_cast<size_t>(rows * (width + 3)), rng);
  for (int64_t i = 0; i < rows; ++i) {
    if (width > 2) t[i * (width + 3) + 2] = -kInf;
    if (width > 5) t[i * (width + 3) + 5] = -100.0f;
  }
  if (rows > 4 && width > 1) t[4 * (width + 3) + 1] = kNaN;
  return t;
}

TEST(SoftmaxTiles, OnlineStepMatchesTheDefinition) {
  std::mt19937 rng(3);
  for (int64_t width : {1, 16, 37, 128}) {
    const int64_t rows = 7, ld = width + 3, f = 19;
    const std::vector<float> tile0 = logits(rows, width, rng), acc0 = random_floats(rows * f, rng);
    // Row limits: whole, none, a partial vector, past a vector; null = all `width`.
    std::vector<int64_t> cols = {width, 0, std::min<int64_t>(width, 5), std::min<int64_t>(width, 17),
                                 width, width / 2, 1};
    // Running maxima before this block: none yet, below, above the block's logits, equal.
    const std::vector<float> m0 = {-kInf, -1.0f, 50.0f, 0.5f, -kInf, 2.0f, -kInf};
    const std::vector<float> l0 = {0.0f, 2.0f, 1.0f, 3.0f, 0.0f, 1.5f, 0.0f};
    for (bool limited : {false, true}) {
      SCOPED_TRACE(fmt::format("width {} limited {}", width, limited));
      on_both_paths([&] {
        std::vector<float> tile = tile0, acc = acc0, m = m0, l = l0;
        online_softmax_block(tile.data(), ld, rows, width, limited ? cols.data() : nullptr, m.data(),
                             l.data(), acc.data(), f);
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t c = limited ? cols[i] : width;
          double mx = m0[i];
          bool nan = std::isnan(m0[i]);
          for (int64_t j = 0; j < c; ++j) {
            nan = nan || std::isnan(tile0[i * ld + j]);
            mx = std::max<double>(mx, tile0[i * ld + j]);
          }
          if (nan) mx = NAN;
          const double shift = std::isinf(mx) && mx < 0 ? 0 : mx;
          double sum = 0;
          for (int64_t j = 0; j < width; ++j) {
            double p = j < c ? std::exp(double(tile0[i * ld + j]) - shift) : 0;
            if (p < std::numeric_limits<float>::min()) p = std::isnan(p) ? p : 0;  // flushed
            sum += p;
            expect_close(tile[i * ld + j], p, 2e-6, fmt::format("p[{}][{}]", i, j));
          }
          const double correction = std::exp(double(m0[i]) - shift);
          expect_close(m[i], mx, 0, fmt::format("m[{}]", i));
          expect_close(l[i], l0[i] * correction + sum, 1e-5, fmt::format("l[{}]", i));
          for (int64_t j = 0; j < f; ++j)
            expect_close(acc[i * f + j], acc0[i * f + j] * correction, 1e-6,
                         fmt::format("acc[{}][{}]", i, j));
        }
      });
    }
  }
}

TEST(SoftmaxTiles, ProbabilitiesFromTheLogsumexp) {
  std::mt19937 rng(4);
  for (int64_t width : {3, 16, 50, 128}) {
    const int64_t rows = 6, ld = width + 3;
    const std::vector<float> tile0 = logits(rows, width, rng);
    const std::vector<float> lse = {0.5f, -kInf, 3.0f, 1.0f, 2.0f, -2.0f};
    const std::vector<int64_t> cols = {width, width, 0, std::min<int64_t>(width, 20), 1, width - 1};
    for (bool limited : {false, true}) {
      SCOPED_TRACE(fmt::format("width {} limited {}", width, limited));
      on_both_paths([&] {
        std::vector<float> tile = tile0;
        probabilities_block(tile.data(), ld, rows, width, limited ? cols.data() : nullptr,
                            lse.data());
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t c = limited ? cols[i] : width;
          const double shift = std::isinf(lse[i]) ? 0 : lse[i];
          for (int64_t j = 0; j < width; ++j) {
            double p = j < c ? std::exp(double(tile0[i * ld + j]) - shift) : 0;
            if (p < std::numeric_limits<float>::min()) p = std::isnan(p) ? p : 0;
            expect_close(tile[i * ld + j], p, 2e-6, fmt::format("p[{}][{}]", i, j));
          }
        }
      });
    }
  }
}

}  // namespace
}  // namespace ein
