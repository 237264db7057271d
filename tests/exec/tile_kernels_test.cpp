// The fused attention's tile kernels (exec/tile_gemm.h, exec/softmax_tiles.h) against their
// definitions evaluated in double, on every path the CPU can run: the AVX-512 code, the AVX2
// code (an AVX-512 CPU's too) and the portable one (the BLAS and vector_math.h); and the
// AMX kernels of bf16 attention (exec/amx_tiles.h), where the CPU has AMX. Sizes
// straddle the register blocks (6 rows, 16-column vectors, 64-column panels), A comes
// row-major and transposed, C with and without accumulation, and the values include ±inf, NaN
// and logits whose exp is subnormal.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/amx_tiles.h"
#include "exec/softmax_tiles.h"
#include "exec/tile_gemm.h"
#include "runtime/amx.h"

namespace ein {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Runs `body` on the CPU's own path (AVX-512 or AVX2 where it has them), on the AVX2 one (an
/// AVX-512 CPU's too) and on the portable one.
template <class F>
void on_both_paths(F body) {
  for (int path = 0; path < 3; ++path) {
    force_avx2_tile_kernels(path == 1);
    force_portable_tile_kernels(path == 2);
    SCOPED_TRACE(std::string("tile kernels on ") + tile_kernels_path());
    body();
  }
  force_avx2_tile_kernels(false);
  force_portable_tile_kernels(false);
}

/// Same value, NaN for NaN, exactly 0 for 0 (a masked or underflowed probability, exp(-inf)),
/// or within a relative tolerance.
void expect_close(double got, double want, double tol, const std::string& what) {
  if (std::isnan(want) || std::isinf(want) || want == 0) {
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

// The bf16 tile kernels of bf16 attention (exec/amx_tiles.h). bf16_tile_gemm runs only where
// the CPU has AMX or AVX512-BF16 (each kernel is checked where it runs); the packers run
// everywhere, and on those machines their AVX-512 path must give the same bits as the scalar
// one (force_no_amx_tiles).

/// bf16 bits to the float they stand for.
float from_bf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

/// Runs `body` with the bf16 tile kernels on (where the CPU has them) and off, returning both
/// results.
template <class F>
auto with_and_without_amx(F body) {
  force_no_amx_tiles(false);
  auto with = body();
  force_no_amx_tiles(true);
  auto without = body();
  force_no_amx_tiles(false);
  return std::pair{with, without};
}

/// f32 values of every kind: ordinary, ±0, ±inf, NaN, subnormal, the largest finite, and
/// values whose bf16 rounding ties (to even) or carries into the exponent.
std::vector<float> awkward_values(size_t count, std::mt19937& rng) {
  const std::vector<float> special{0.0f, -0.0f, kInf, -kInf, kNaN, 1e-40f, -3e-39f,
                                   std::numeric_limits<float>::max(), 1.00390625f,
                                   1.01171875f, 1.9999999f, -65535.0f};
  std::normal_distribution<float> d;
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = i % 7 == 3 ? special[(i / 7) % special.size()] : d(rng);
  return v;
}

TEST(AmxTiles, PackersGiveTheSameBitsOnBothPaths) {
  std::mt19937 rng(21);
  const int64_t rows = 37, cols = 45, ld = 50;
  const std::vector<float> x = awkward_values(static_cast<size_t>(rows * ld), rng);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(x[i]) >> 16);
  const int64_t rp = 48, cp = 64;
  const auto a = with_and_without_amx([&] {
    std::vector<uint16_t> out(rp * cp, 0xdead);
    a_from_f32(x.data(), ld, rows, cols, 0.5f, out.data(), cp, rp, cp);
    return out;
  });
  EXPECT_EQ(a.first, a.second) << "a_from_f32";
  const auto p = with_and_without_amx([&] {
    std::vector<uint16_t> out((rp / 2) * 2 * cp, 0xdead);
    pairs_from_f32(x.data(), ld, rows, cols, 2.0f, out.data(), 2 * cp, rp, cp);
    return out;
  });
  EXPECT_EQ(p.first, p.second) << "pairs_from_f32";
  const auto pb = with_and_without_amx([&] {
    std::vector<uint16_t> out((rp / 2) * 2 * cp, 0xdead);
    pairs_from_bf16(xb.data(), ld, rows, cols, out.data(), 2 * cp, rp, cp);
    return out;
  });
  EXPECT_EQ(pb.first, pb.second) << "pairs_from_bf16";
  // And what they hold: element (r, c) of the operand, zeros in the padding.
  for (int64_t r = 0; r < rp; ++r)
    for (int64_t c = 0; c < cp; ++c) {
      const bool in = r < rows && c < cols;
      const float want = in ? 0.5f * x[r * ld + c] : 0.0f;
      const float got = from_bf16(a.first[r * cp + c]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << r << "," << c;
      } else if (std::isinf(want)) {
        EXPECT_EQ(got, want) << r << "," << c;
      } else if (std::fpclassify(want) == FP_SUBNORMAL) {
        EXPECT_EQ(got, 0.0f) << r << "," << c;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << r << "," << c;
      } else {
        EXPECT_LE(std::abs(got - want), std::abs(want) / 256) << r << "," << c;  // half a bf16 ulp
      }
      const uint16_t pair = pb.first[(r / 2) * 2 * cp + 2 * c + r % 2];
      EXPECT_EQ(pair, in ? xb[r * ld + c] : 0) << "pairs " << r << "," << c;
    }
}

TEST(AmxTiles, TransposedPairsMatchTheDefinition) {
  std::mt19937 rng(22);
  // Even widths and row strides go through the 32-bit word transpose, odd ones element by
  // element; both with rows (keys) past a 16-row block.
  for (const auto& [rows, cols, ld] : std::vector<std::array<int64_t, 3>>{
           {19, 12, 20}, {40, 64, 64}, {19, 13, 20}, {21, 12, 25}}) {
    SCOPED_TRACE(fmt::format("{} x {} (row stride {})", rows, cols, ld));
    const int64_t rp = round_up(rows, 16), cp = round_up(cols, 32);
    const std::vector<float> x = awkward_values(static_cast<size_t>(rows * ld), rng);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(x[i]) >> 16);
    // B = xᵀ (cols × rows) as pairs: pair-row p holds columns 2p and 2p + 1 of x's rows.
    std::vector<uint16_t> pairs((cp / 2) * 2 * rp, 0xdead);
    pairs_from_bf16_transposed(xb.data(), ld, rows, cols, pairs.data(), 2 * rp, cp, rp);
    for (int64_t c = 0; c < cp; ++c)
      for (int64_t r = 0; r < rp; ++r) {
        const bool in = r < rows && c < cols;
        EXPECT_EQ(pairs[(c / 2) * 2 * rp + 2 * r + c % 2], in ? xb[r * ld + c] : 0) << r << "," << c;
      }
  }
}

TEST(AmxTiles, DsOperandsMatchTheDefinitionOnBothPaths) {
  std::mt19937 rng(24);
  std::normal_distribution<float> d;
  for (const auto& [rows, cols] : std::vector<std::array<int64_t, 2>>{{64, 128}, {37, 45}, {1, 1}}) {
    SCOPED_TRACE(fmt::format("{} x {}", rows, cols));
    const int64_t ld = 130;
    std::vector<float> p(rows * ld), dp(rows * ld), delta(rows);
    for (auto& x : p) x = std::abs(d(rng));
    for (auto& x : dp) x = d(rng);
    for (auto& x : delta) x = d(rng);
    p[0] = 1e-39f;  // a subnormal probability: its dS rounds to 0
    const int64_t lda = 128, ldb = 256;
    const auto both = with_and_without_amx([&] {
      std::vector<uint16_t> a(64 * lda, 0xdead), pairs(32 * ldb, 0xdead);
      ds_operands(p.data(), dp.data(), ld, delta.data(), rows, cols, 0.125f, a.data(), lda,
                  pairs.data(), ldb);
      return std::pair{a, pairs};
    });
    EXPECT_EQ(both.first.first, both.second.first) << "A rows";
    EXPECT_EQ(both.first.second, both.second.second) << "pairs";
    const auto& [a, pairs] = both.first;
    for (int64_t r = 0; r < round_up(rows, 32); ++r)
      for (int64_t c = 0; c < round_up(cols, 32); ++c) {
        const bool in = r < rows && c < cols;
        const double want = in ? 0.125 * p[r * ld + c] * (dp[r * ld + c] - delta[r]) : 0.0;
        const double tol = std::fpclassify(static_cast<float>(want)) == FP_SUBNORMAL ? 1e-38 : std::abs(want) / 200;
        if (r < round_up(rows, 16)) {
          EXPECT_NEAR(from_bf16(a[r * lda + c]), want, tol) << "A " << r << "," << c;
        }
        if (c < round_up(cols, 16)) {
          EXPECT_NEAR(from_bf16(pairs[(r / 2) * ldb + 2 * c + r % 2]), want, tol) << "pairs " << r << "," << c;
        }
      }
  }
}

/// The kernels bf16_tile_gemm can run on this CPU: "amx" and "avx512-bf16" (which AMX
/// machines have too), each selected by force_avx512_bf16_tiles.
std::vector<std::string> bf16_tile_kernels() {
  std::vector<std::string> kernels;
  if (amx_tiles()) kernels.push_back("amx");
  if (avx512_bf16_usable()) kernels.push_back("avx512-bf16");
  return kernels;
}

TEST(AmxTiles, ProductMatchesTheDefinitionOnEveryKernel) {
  const std::vector<std::string> kernels = bf16_tile_kernels();
  if (kernels.empty()) GTEST_SKIP() << "this CPU (or kernel) has neither AMX nor AVX512-BF16";
  EXPECT_TRUE(bf16_tiles());
  std::mt19937 rng(23);
  std::normal_distribution<float> d;
  for (const std::string& kernel : kernels) {
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {16, 16, 32}, {48, 80, 96}, {64, 128, 64}, {32, 16, 160}, {16, 48, 32}, {32, 112, 64}}) {
      SCOPED_TRACE(fmt::format("{}: {} x {} x {}", kernel, m, n, k));
      force_avx512_bf16_tiles(kernel == "avx512-bf16");
      EXPECT_EQ(amx_tiles(), kernel == "amx");
      const int64_t lda = k + 8, ldb = 2 * n + 32, ldc = n + 5;
      std::vector<uint16_t> a(m * lda), b((k / 2) * ldb);
      for (auto& x : a) x = static_cast<uint16_t>(std::bit_cast<uint32_t>(d(rng)) >> 16);
      for (auto& x : b) x = static_cast<uint16_t>(std::bit_cast<uint32_t>(d(rng)) >> 16);
      std::vector<float> c0(m * ldc);
      for (auto& x : c0) x = d(rng);
      for (bool accumulate : {false, true}) {
        std::vector<float> c = c0;
        bf16_tile_gemm(m, n, k, a.data(), lda, b.data(), ldb, accumulate, c.data(), ldc);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double want = accumulate ? c0[i * ldc + j] : 0.0, mag = std::abs(want);
            for (int64_t p = 0; p < k; ++p) {
              const double term = static_cast<double>(from_bf16(a[i * lda + p])) *
                                  from_bf16(b[(p / 2) * ldb + 2 * j + p % 2]);
              want += term;
              mag += std::abs(term);
            }
            // Products of bf16 are exact in f32; the sums round in f32.
            EXPECT_NEAR(c[i * ldc + j], want, 1e-6 * mag + 1e-30) << i << "," << j;
          }
        for (int64_t i = 0; i < m; ++i)  // columns past n untouched
          for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);
      }
    }
  }
  force_avx512_bf16_tiles(false);
  EXPECT_THROW(bf16_tile_gemm(8, 16, 32, nullptr, 32, nullptr, 32, false, nullptr, 16),
               std::logic_error);
}

}  // namespace
}  // namespace ein
