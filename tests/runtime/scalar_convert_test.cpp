// The narrow float formats bit by bit: every pattern decodes to the value its fields define
// (computed here with ldexp, independently of the library) and round-trips through float;
// rounding from float and double is to nearest, ties to even; the spot values of the lecture.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include <ein/scalar_convert.h>

namespace ein {
namespace {

struct Layout {
  int exp_bits, man_bits;
  bool finite_only;
};

// The value a pattern means, from its sign/exponent/mantissa fields (IEEE 754 / OCP FP8).
double reference_value(uint32_t v, Layout f) {
  const int bias = (1 << (f.exp_bits - 1)) - 1;
  const bool neg = (v >> (f.exp_bits + f.man_bits)) & 1u;
  const uint32_t e = (v >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t m = v & ((1u << f.man_bits) - 1);
  const uint32_t all = (1u << f.exp_bits) - 1;
  double r;
  if (f.finite_only && e == all && m == (1u << f.man_bits) - 1) return NAN;
  if (!f.finite_only && e == all) {
    if (m != 0) return NAN;
    r = INFINITY;
  } else if (e == 0) {
    r = std::ldexp(static_cast<double>(m), 1 - bias - f.man_bits);
  } else {
    r = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.man_bits),
                   static_cast<int>(e) - bias);
  }
  return neg ? -r : r;
}

template <class T, class Bits>
void check_every_pattern(Layout f) {
  const uint32_t count = 1u << (8 * sizeof(Bits));
  for (uint32_t v = 0; v < count; ++v) {
    const T x{static_cast<Bits>(v)};
    const float value = to_float(x);
    const double expected = reference_value(v, f);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << std::hex << v;
      ASSERT_TRUE(std::isnan(to_float(round_to<T>(value)))) << std::hex << v;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), expected) << "pattern 0x" << std::hex << v;
    ASSERT_EQ(round_to<T>(value).bits, v) << "float round trip of 0x" << std::hex << v;
    ASSERT_EQ(round_to<T>(static_cast<double>(value)).bits, v) << "double round trip 0x" << v;
  }
}

TEST(ScalarConvert, EveryF16PatternDecodesAndRoundTrips) {
  check_every_pattern<Half, uint16_t>({5, 10, false});
}
TEST(ScalarConvert, EveryBF16PatternDecodesAndRoundTrips) {
  check_every_pattern<BFloat16, uint16_t>({8, 7, false});
}
TEST(ScalarConvert, EveryE4M3PatternDecodesAndRoundTrips) {
  check_every_pattern<Float8E4M3, uint8_t>({4, 3, true});
}
TEST(ScalarConvert, EveryE5M2PatternDecodesAndRoundTrips) {
  check_every_pattern<Float8E5M2, uint8_t>({5, 2, false});
}

// For random floats in range: the result is no farther than either neighbour pattern, and on
// a tie its mantissa is even. Neighbours of a finite non-negative pattern are bits +- 1.
template <class T>
void check_nearest_even(float max_finite, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> log_mag(-30.0, std::log2(max_finite));
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(std::exp2(log_mag(gen)));
    const T q = round_to<T>(x);
    const double got = to_float(q);
    const double err = std::fabs(got - x);
    for (int delta : {-1, 1}) {
      if (q.bits == 0 && delta < 0) continue;
      const T n{static_cast<decltype(q.bits)>(q.bits + delta)};
      const double other = to_float(n);
      if (std::isnan(other) || std::isinf(other)) continue;
      const double other_err = std::fabs(other - x);
      ASSERT_LE(err, other_err) << "x=" << x << " got " << got << " neighbour " << other;
      if (err == other_err) {
        ASSERT_EQ(q.bits & 1u, 0u) << "tie not to even at x=" << x;
      }
    }
  }
}

TEST(ScalarConvert, RoundsToNearestEven) {
  check_nearest_even<Half>(65504.0f, 1);
  check_nearest_even<BFloat16>(3.0e38f, 2);
  check_nearest_even<Float8E4M3>(448.0f, 3);
  check_nearest_even<Float8E5M2>(57344.0f, 4);
}

TEST(ScalarConvert, LectureSpotValues) {
  EXPECT_EQ(to_float(round_to<Half>(1e-8f)), 0.0f);  // below half of f16's 2^-24
  EXPECT_NE(to_float(round_to<BFloat16>(1e-8f)), 0.0f);
  EXPECT_NEAR(to_float(round_to<BFloat16>(1e-8f)), 1e-8, 1e-8 / 128);
  EXPECT_EQ(round_to<Half>(65504.0f).bits, 0x7bff);
  EXPECT_EQ(round_to<Half>(65519.0f).bits, 0x7bff);
  EXPECT_EQ(round_to<Half>(65520.0f).bits, 0x7c00);  // the tie rounds to even: inf
  EXPECT_EQ(round_to<Half>(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(round_to<Half>(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie to even (zero)
  EXPECT_EQ(round_to<Half>(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(round_to<Half>(-0.0f).bits, 0x8000);
  EXPECT_EQ(round_to<Half>(-INFINITY).bits, 0xfc00);
  EXPECT_EQ(round_to<Float8E4M3>(448.0f).bits, 0x7e);
  EXPECT_EQ(to_float(Float8E4M3{0x7e}), 448.0f);
  EXPECT_EQ(round_to<Float8E4M3>(464.0f).bits, 0x7e);  // tie to even stays finite
  EXPECT_EQ(round_to<Float8E4M3>(465.0f).bits, 0x7f);  // E4M3FN has no inf: NaN
  EXPECT_EQ(round_to<Float8E4M3>(-INFINITY).bits, 0xff);
  EXPECT_TRUE(std::isnan(to_float(Float8E4M3{0x7f})));
  EXPECT_EQ(to_float(Float8E4M3{0x01}), std::ldexp(1.0f, -9));
  EXPECT_EQ(round_to<Float8E5M2>(57344.0f).bits, 0x7b);
  EXPECT_EQ(round_to<Float8E5M2>(61440.0f).bits, 0x7c);  // tie to even: inf
  EXPECT_TRUE(std::isinf(to_float(Float8E5M2{0x7c})));
  EXPECT_EQ(round_to<BFloat16>(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);  // tie, even
  EXPECT_EQ(round_to<BFloat16>(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);  // tie, up
}

TEST(ScalarConvert, DoubleIsRoundedOnce) {
  // 1 + 2^-11 + 2^-40 lies just above the midpoint of f16's 1 and 1 + 2^-10. Rounding to float
  // first would land exactly on the midpoint and then tie to 1.0.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(round_to<Half>(x).bits, 0x3c01);
  EXPECT_EQ(round_to<Half>(1.0 + std::ldexp(1.0, -11)).bits, 0x3c00);
  EXPECT_EQ(round_to<Half>(1e300).bits, 0x7c00);
  EXPECT_EQ(round_to<Half>(-1e-300).bits, 0x8000);
  EXPECT_TRUE(std::isnan(to_float(round_to<BFloat16>(std::nan("")))));
}

TEST(ScalarConvert, IntegerAndBoolConversions) {
  EXPECT_EQ(convert<int32_t>(2.9), 2);
  EXPECT_EQ(convert<int32_t>(-2.9f), -2);
  EXPECT_EQ(convert<int8_t>(1000.0), 127);  // saturates
  EXPECT_EQ(convert<uint8_t>(-5.0), 0);
  EXPECT_EQ(convert<int64_t>(std::nan("")), 0);
  EXPECT_EQ(convert<int64_t>(1e30), INT64_MAX);
  EXPECT_EQ(convert<int8_t>(int32_t{300}), 44);  // integers wrap, as in PyTorch
  EXPECT_EQ(convert<bool>(0.5), true);
  EXPECT_EQ(convert<bool>(Half{0x8000}), false);  // -0
  EXPECT_EQ(convert<float>(true), 1.0f);
  EXPECT_EQ(convert<Half>(int64_t{2049}).bits, 0x6800);  // 2049 -> 2048 (tie to even)
  EXPECT_EQ(convert<double>(Float8E5M2{0x3c}), 1.0);
}

}  // namespace
}  // namespace ein
